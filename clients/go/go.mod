module github.com/memevo/memevo/clients/go

// The oldest Go the client needs: range-over-func iterators (iter.Seq) came in 1.23, and no
// requirement below asks for more (grpc v1.75 is the newest whose go line is 1.23). A consumer
// with newer requirements gets newer versions as usual. The protoc plugins are pinned in tools/.
go 1.23.0

require (
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.33.0 // indirect
	golang.org/x/text v0.26.0 // indirect
)
