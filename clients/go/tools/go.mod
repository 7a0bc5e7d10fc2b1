// The protoc plugins scripts/gen_clients.sh builds, at pinned versions. A module of their own, so
// that their newer go line and requirements do not reach the client's go.mod and its consumers.
module github.com/memevo/memevo/clients/go/tools

go 1.24.0

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
