package memevo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	memevo "github.com/memevo/memevo/clients/go"
	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

var (
	live      *sidecar
	client    *memevo.Client // over the unix socket
	tcpClient *memevo.Client // over 127.0.0.1
)

// TestMain starts one sidecar for the package's tests and stops it with SIGTERM at the end.
func TestMain(m *testing.M) {
	var err error
	live, err = startSidecar()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot start a sidecar:", err)
		os.Exit(1)
	}
	client, err = memevo.NewClient(live.unix)
	if err == nil {
		tcpClient, err = memevo.NewClient(live.tcp, memevo.WithTimeout(5*time.Second))
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot create a client:", err)
	} else {
		code = m.Run()
		client.Close()
		tcpClient.Close()
	}
	if err := live.stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// axis is a vector pointing mostly along one axis (distinct per axis, never all zeros).
func axis(i int, jitter float32) []float32 {
	v := make([]float32, dimension)
	for j := range v {
		v[j] = 0.01
	}
	v[i%dimension] = 1
	v[(i+1)%dimension] = jitter
	return v
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestVectorsRoundTrip(t *testing.T) {
	b := memevo.EncodeVector([]float32{1.5, -2, 0.25})
	if !slices.Equal(b[:4], []byte{0x00, 0x00, 0xc0, 0x3f}) {
		t.Fatalf("1.5 packed as % x, want little-endian float32", b[:4])
	}
	v, err := memevo.DecodeVector(b)
	if err != nil || !slices.Equal(v, []float32{1.5, -2, 0.25}) {
		t.Fatalf("DecodeVector = %v, %v", v, err)
	}
	if _, err := memevo.DecodeVector([]byte{1, 2, 3}); err == nil {
		t.Fatal("3 bytes must not decode")
	}
}

func TestNewClientRejectsRelativeUnixTarget(t *testing.T) {
	if _, err := memevo.NewClient("unix://relative.sock"); err == nil {
		t.Fatal("want an error for a relative unix socket path")
	}
}

func TestRememberAndIdempotency(t *testing.T) {
	ctx := ctxT(t)
	in := memevo.Input{
		Content: "Alice prefers green tea", Vector: axis(0, 0),
		Kind: memevov1.MemoryKind_MEMORY_KIND_PREFERENCE, Entity: "user:alice",
		Fact:      &memevov1.Fact{Attribute: "drink", Value: "green tea"},
		Source:    memevov1.MemorySource_MEMORY_SOURCE_USER_STATEMENT,
		Tags:      []string{"drinks"},
		ValidFrom: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	first, err := client.Remember(ctx, in, memevo.WriteOptions{RequestID: "go-remember-1", Turn: memevo.Ptr[int64](3)})
	if err != nil {
		t.Fatal(err)
	}
	m := first.Memory
	if first.Outcome != memevov1.WriteOutcome_WRITE_OUTCOME_CREATED || first.Replayed || m.GetId() == 0 {
		t.Fatalf("first write = %+v", first)
	}
	if m.GetEntity() != "user:alice" || m.GetFact().GetValue() != "green tea" || m.GetTurn() != 3 ||
		m.GetState() != memevov1.MemoryState_MEMORY_STATE_ACTIVE || !m.GetValidFrom().AsTime().Equal(in.ValidFrom) {
		t.Fatalf("stored memory = %v", m)
	}
	// A retry differs only in its turn, which the request's fingerprint leaves out.
	again, err := client.Remember(ctx, in, memevo.WriteOptions{RequestID: "go-remember-1", Turn: memevo.Ptr[int64](4)})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Memory.GetId() != m.GetId() || again.Memory.GetTurn() != 3 {
		t.Fatalf("retry with the same request id = %+v, want the first result replayed", again)
	}
	_, err = client.Remember(ctx, memevo.Input{Content: "another memory", Vector: axis(0, 0)}, memevo.WriteOptions{RequestID: "go-remember-1"})
	var merr *memevo.Error
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrAlreadyExists) || merr.Reason != "REQUEST_ID_REUSED" ||
		len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "request_id" {
		t.Fatalf("the same request id for another memory: err = %v, want ALREADY_EXISTS REQUEST_ID_REUSED naming request_id", err)
	}
}

func TestTCPServesTheSameData(t *testing.T) {
	ctx := ctxT(t)
	w, err := tcpClient.Remember(ctx, memevo.Input{Content: "over tcp", Vector: axis(5, 0)}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.GetOne(ctx, w.Memory.GetId(), false)
	if err != nil || got.GetContent() != "over tcp" {
		t.Fatalf("GetOne over unix = %v, %v", got, err)
	}
}

func TestRecall(t *testing.T) {
	ctx := ctxT(t)
	_, err := client.RememberBatch(ctx, []memevo.Input{
		{Content: "Bob deploys with blue-green", Vector: axis(1, 0), Entity: "user:bob", Tags: []string{"ops"}},
		{Content: "Bob likes coffee", Vector: axis(2, 0), Entity: "user:bob"},
		{Content: "Carol likes coffee", Vector: axis(2, 0.3), Entity: "user:carol"},
	}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found, err := client.Recall(ctx, memevo.VectorQuery(axis(2, 0)), memevo.RecallOptions{K: 3, IncludeVectors: true})
	if err != nil {
		t.Fatal(err)
	}
	top := found.GetMemories()[0]
	if top.GetMemory().GetContent() != "Bob likes coffee" || top.GetSimilarity() < 0.99 || found.GetRetrievalId() == "" {
		t.Fatalf("recall = %v", found)
	}
	v, err := memevo.VectorOf(top.GetMemory())
	if err != nil || len(v) != dimension || v[2] < 0.999 {
		t.Fatalf("returned vector = %v, %v", v, err)
	}
	carol, err := client.Recall(ctx, memevo.VectorQuery(axis(2, 0)), memevo.RecallOptions{K: 5, Filter: &memevo.Filter{Entity: "user:carol"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(carol.GetMemories()) != 1 || carol.GetMemories()[0].GetMemory().GetContent() != "Carol likes coffee" {
		t.Fatalf("entity filter = %v", carol)
	}
}

func TestRecallPeekCountsNoAccess(t *testing.T) {
	ctx := ctxT(t)
	w, err := client.Remember(ctx, memevo.Input{Content: "peeked at", Vector: axis(6, 0), Namespace: "go-peek"}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	options := memevo.RecallOptions{K: 1, Filter: &memevo.Filter{Namespace: "go-peek"}, Peek: true}
	looked, err := client.Recall(ctx, memevo.VectorQuery(axis(6, 0)), options)
	if err != nil || len(looked.GetMemories()) != 1 || looked.GetRetrievalId() != "" {
		t.Fatalf("peek = %v, %v", looked, err)
	}
	got, err := client.GetOne(ctx, w.Memory.GetId(), false)
	if err != nil || got.GetAccessCount() != 0 {
		t.Fatalf("after a peek: %v, %v", got, err)
	}
	options.Peek = false
	if used, err := client.Recall(ctx, memevo.VectorQuery(axis(6, 0)), options); err != nil || used.GetRetrievalId() == "" {
		t.Fatalf("recall = %v, %v", used, err)
	}
	got, err = client.GetOne(ctx, w.Memory.GetId(), false)
	if err != nil || got.GetAccessCount() != 1 {
		t.Fatalf("after a recall: %v, %v", got, err)
	}
}

func TestRememberBatchIsAllOrNothing(t *testing.T) {
	ctx := ctxT(t)
	before, err := client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.RememberBatch(ctx, []memevo.Input{
		{Content: "good", Vector: axis(3, 0)},
		{Content: "bad", Vector: []float32{1, 2, 3}},
	}, memevo.WriteOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || merr.Code != codes.InvalidArgument {
		t.Fatalf("err = %v, want an *memevo.Error with InvalidArgument", err)
	}
	if len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "memories[1].vector" {
		t.Fatalf("field violations = %+v", merr.FieldViolations)
	}
	after, err := client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetTotalCount() != before.GetTotalCount() {
		t.Fatalf("total %d -> %d: a rejected batch wrote something", before.GetTotalCount(), after.GetTotalCount())
	}
}

func TestRememberStream(t *testing.T) {
	ctx := ctxT(t)
	items := func(yield func(memevo.StreamItem) bool) {
		for i := range 20 {
			item := memevo.StreamItem{Input: memevo.Input{Content: fmt.Sprintf("go streamed %d", i), Vector: axis(i, 0.5)}, RequestID: fmt.Sprintf("go-stream-%d", i)}
			if !yield(item) {
				return
			}
		}
	}
	resp, err := client.RememberStream(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetIds()) != 20 || resp.GetCreatedCount() != 20 {
		t.Fatalf("stream = %v", resp)
	}
	replay, err := client.RememberStream(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if replay.GetReplayedCount() != 20 || !slices.Equal(replay.GetIds(), resp.GetIds()) {
		t.Fatalf("replayed stream = %v", replay)
	}
}

func TestRememberStreamGroupsItemsInOrder(t *testing.T) {
	ctx := ctxT(t)
	total := 2*memevo.StreamGroupItems + 9
	turnOf := func(i int) int64 {
		if i < 70 {
			return 4
		}
		return 5
	}
	items := func(yield func(memevo.StreamItem) bool) {
		for i := range total {
			turn := turnOf(i)
			item := memevo.StreamItem{Input: memevo.Input{Content: fmt.Sprintf("go grouped %d", i), Vector: axis(i%8, 0.3)}, Turn: &turn}
			if !yield(item) {
				return
			}
		}
	}
	resp, err := client.RememberStream(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCreatedCount() != uint64(total) {
		t.Fatalf("stream = %v", resp)
	}
	got, err := client.Get(ctx, resp.GetIds(), false)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range got.GetMemories() {
		if m.GetContent() != fmt.Sprintf("go grouped %d", i) || m.GetTurn() != turnOf(i) {
			t.Fatalf("item %d = %q at turn %d", i, m.GetContent(), m.GetTurn())
		}
	}
	if len(got.GetMemories()) != total {
		t.Fatalf("got %d of %d", len(got.GetMemories()), total)
	}
}

func TestGetAndForget(t *testing.T) {
	ctx := ctxT(t)
	ws, err := client.RememberBatch(ctx, []memevo.Input{
		{Content: "forget me", Vector: axis(6, 0.2)},
		{Content: "keep me as history", Vector: axis(7, 0.2)},
	}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone, kept := ws[0].Memory.GetId(), ws[1].Memory.GetId()
	got, err := client.Get(ctx, []uint64{kept, 999999, gone}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetMemories()) != 2 || got.GetMemories()[0].GetId() != kept || !slices.Equal(got.GetMissingIds(), []uint64{999999}) {
		t.Fatalf("get = %v", got)
	}

	forgot, err := client.Forget(ctx, []uint64{gone}, memevo.ForgetOptions{Reason: "test", WriteOptions: memevo.WriteOptions{RequestID: "go-forget-1"}})
	if err != nil || !slices.Equal(forgot.GetForgottenIds(), []uint64{gone}) {
		t.Fatalf("forget = %v, %v", forgot, err)
	}
	if _, err := client.GetOne(ctx, gone, false); !errors.Is(err, memevo.ErrNotFound) {
		t.Fatalf("GetOne of a forgotten memory: err = %v, want ErrNotFound", err)
	}
	if _, err := client.Forget(ctx, []uint64{kept}, memevo.ForgetOptions{KeepHistory: true}); err != nil {
		t.Fatal(err)
	}
	m, err := client.GetOne(ctx, kept, false)
	if err != nil || m.GetState() != memevov1.MemoryState_MEMORY_STATE_OBSOLETE {
		t.Fatalf("kept as history: %v, %v", m, err)
	}
}

func TestWatchReplaysInOrder(t *testing.T) {
	ctx := ctxT(t)
	w, err := client.Remember(ctx, memevo.Input{Content: "watched", Vector: axis(4, 0.7)}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for ev, err := range client.Watch(ctx, memevo.WatchOptions{AfterSequence: memevo.Ptr[uint64](0)}) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.GetSequence())
		if ev.GetMemoryId() == w.Memory.GetId() && ev.GetType() == memevov1.ChangeEventType_CHANGE_EVENT_TYPE_CREATED {
			break
		}
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("sequences %v are not 1, 2, 3, ...", seqs)
		}
	}
}

func TestWatchLiveEvents(t *testing.T) {
	ctx := ctxT(t)
	events := make(chan *memevov1.ChangeEvent)
	errs := make(chan error, 1)
	go func() {
		for ev, err := range client.Watch(ctx, memevo.WatchOptions{Types: []memevov1.ChangeEventType{memevov1.ChangeEventType_CHANGE_EVENT_TYPE_CREATED}}) {
			if err != nil {
				errs <- err
				return
			}
			events <- ev
			return // one is enough; returning cancels the call
		}
	}()
	time.Sleep(200 * time.Millisecond) // let the Watch subscribe before the write
	w, err := client.Remember(ctx, memevo.Input{Content: "live event", Vector: axis(2, 0.9)}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.GetMemoryId() != w.Memory.GetId() {
			t.Fatalf("live event %v, want memory %d", ev, w.Memory.GetId())
		}
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("no live event")
	}
}

func TestWatchEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var last error
	for _, err := range client.Watch(ctx, memevo.WatchOptions{}) {
		last = err
	}
	if !errors.Is(last, memevo.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want ErrDeadlineExceeded", last)
	}
	var merr *memevo.Error
	if !errors.As(last, &merr) || !merr.Retryable() {
		t.Fatalf("a deadline is retryable: %v", last)
	}
}

func TestStats(t *testing.T) {
	s, err := client.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.GetDimension() != dimension || s.GetEmbedder() != "none" || s.GetTotalCount() == 0 || s.GetLastSequence() == 0 {
		t.Fatalf("stats = %v", s)
	}
}

func TestInvalidArgumentCarriesDetails(t *testing.T) {
	_, err := client.Remember(ctxT(t), memevo.Input{Content: "short", Vector: []float32{1, 2, 3}}, memevo.WriteOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) {
		t.Fatalf("err = %v (%T), want *memevo.Error", err, err)
	}
	if !errors.Is(err, memevo.ErrInvalidArgument) || merr.Retryable() {
		t.Fatalf("err = %v, want a non-retryable InvalidArgument", err)
	}
	if len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "memory.vector" ||
		!strings.Contains(merr.FieldViolations[0].Description, "dimension is 8") {
		t.Fatalf("field violations = %+v", merr.FieldViolations)
	}
	if merr.Reason != "INVALID_ARGUMENT" || merr.Domain != "memevo.dev" {
		t.Fatalf("ErrorInfo reason %q domain %q", merr.Reason, merr.Domain)
	}
}

func TestUnreachableSidecarIsUnavailable(t *testing.T) {
	c, err := memevo.NewClient("unix:///nonexistent/memevo.sock", memevo.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Stats(context.Background())
	var merr *memevo.Error
	if !errors.As(err, &merr) || merr.Code != codes.Unavailable || !merr.Retryable() {
		t.Fatalf("err = %v, want a retryable Unavailable", err)
	}
}

func TestHealth(t *testing.T) {
	resp, err := healthpb.NewHealthClient(client.Conn()).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: ""})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", resp, err)
	}
}

// TestReflection lists and describes the service the way a generic client (grpcurl) does.
func TestReflection(t *testing.T) {
	ctx := ctxT(t)
	stream, err := reflectionpb.NewServerReflectionClient(client.Conn()).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	ask := func(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	list := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "memevo.v1.MemoryService") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Fatalf("listed services %v", names)
	}
	files := ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "memevo.v1.MemoryService"}})
	var methods []string
	for _, raw := range files.GetFileDescriptorResponse().GetFileDescriptorProto() {
		var fd descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &fd); err != nil {
			t.Fatal(err)
		}
		for _, svc := range fd.GetService() {
			if svc.GetName() == "MemoryService" {
				for _, m := range svc.GetMethod() {
					methods = append(methods, m.GetName())
				}
			}
		}
	}
	want := memevov1.File_memevo_v1_memory_service_proto.Services().ByName("MemoryService").Methods()
	if len(methods) != want.Len() {
		t.Fatalf("reflection describes methods %v, want %d methods", methods, want.Len())
	}
	for i := range want.Len() {
		if !slices.Contains(methods, string(want.Get(i).Name())) {
			t.Fatalf("reflection lacks %s (has %v)", want.Get(i).Name(), methods)
		}
	}
}

func TestSupersedeAndHistory(t *testing.T) {
	ctx := ctxT(t)
	fact := func(value string) memevo.Input {
		return memevo.Input{
			Content: "Dana's editor is " + value, Vector: axis(3, 0.4), Kind: memevov1.MemoryKind_MEMORY_KIND_FACT,
			Entity: "user:dana", Fact: &memevov1.Fact{Attribute: "editor", Value: value},
		}
	}
	old, err := client.Remember(ctx, fact("vim"), memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.SupersedeWith(ctx, old.Memory.GetId(), fact("helix"), memevo.SupersedeOptions{Reason: "user switched"})
	if err != nil {
		t.Fatal(err)
	}
	oldM, newM := resp.GetOldMemory(), resp.GetNewMemory()
	if oldM.GetState() != memevov1.MemoryState_MEMORY_STATE_OBSOLETE || oldM.GetSupersededBy() != newM.GetId() ||
		newM.GetState() != memevov1.MemoryState_MEMORY_STATE_ACTIVE || newM.GetId() == oldM.GetId() {
		t.Fatalf("supersede = old %v / new %v", oldM, newM)
	}

	byKey, err := client.HistoryOfFact(ctx, &memevov1.FactKey{Entity: "user:dana", Attribute: "editor"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, v := range byKey.GetVersions() {
		ids = append(ids, v.GetId())
	}
	if i, j := slices.Index(ids, oldM.GetId()), slices.Index(ids, newM.GetId()); i < 0 || j < 0 || i > j {
		t.Fatalf("fact-key history %v: want %d before %d", ids, oldM.GetId(), newM.GetId())
	}
	if len(byKey.GetEvents()) == 0 {
		t.Fatal("fact-key history carries no change-log events")
	}
	lineage, err := client.HistoryOfMemory(ctx, oldM.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if got := lineage.GetVersions(); len(got) < 2 || got[len(got)-1].GetId() != newM.GetId() {
		t.Fatalf("lineage of %d = %v, want it to end with %d", oldM.GetId(), got, newM.GetId())
	}
}

func TestReportOutcome(t *testing.T) {
	ctx := ctxT(t)
	if _, err := client.Remember(ctx, memevo.Input{Content: "use the staging cluster first", Vector: axis(6, 0.6)}, memevo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	found, err := client.Recall(ctx, memevo.VectorQuery(axis(6, 0.6)), memevo.RecallOptions{K: 2})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.ReportOutcome(ctx, found.GetRetrievalId(), memevov1.Outcome_OUTCOME_SUCCESS, memevo.ReportOutcomeOptions{Note: "worked"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetUpdatedCount() == 0 {
		t.Fatalf("report outcome updated nothing: %v", resp)
	}
	// The recall searched namespace "default": reported from another namespace, it is unknown.
	_, err = client.ReportOutcome(ctx, found.GetRetrievalId(), memevov1.Outcome_OUTCOME_FAILURE, memevo.ReportOutcomeOptions{Namespace: "elsewhere"})
	if !errors.Is(err, memevo.ErrNotFound) {
		t.Fatalf("retrieval of another namespace: err = %v, want ErrNotFound", err)
	}
	_, err = client.ReportOutcome(ctx, "no-such-retrieval", memevov1.Outcome_OUTCOME_SUCCESS, memevo.ReportOutcomeOptions{})
	if !errors.Is(err, memevo.ErrNotFound) {
		t.Fatalf("unknown retrieval: err = %v, want ErrNotFound", err)
	}
}

func TestPolicyAndFramework(t *testing.T) {
	ctx := ctxT(t)
	policy, err := client.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	changed := proto.Clone(policy).(*memevov1.Policy)
	changed.Name = "go-test-arm"
	updated, err := client.UpdatePolicy(ctx, changed, memevo.WriteOptions{RequestID: "go-policy-1"})
	if err != nil || updated.GetName() != "go-test-arm" {
		t.Fatalf("update policy = %v, %v", updated, err)
	}
	bad := proto.Clone(policy).(*memevov1.Policy)
	bad.SoftConflictSimilarity = 2
	_, err = client.UpdatePolicy(ctx, bad, memevo.WriteOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || merr.Code != codes.InvalidArgument || len(merr.FieldViolations) == 0 {
		t.Fatalf("an out-of-range policy: err = %v, want InvalidArgument with field violations", err)
	}

	before, err := client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	declared, err := client.DeclareFramework(ctx, "go-planner-v2", "new planner", memevo.WriteOptions{RequestID: "go-framework-1"})
	if err != nil || declared.GetPreviousVersion() != before.GetFrameworkVersion() {
		t.Fatalf("declare framework = %v, %v (previous was %q)", declared, err, before.GetFrameworkVersion())
	}
	after, err := client.Stats(ctx)
	if err != nil || after.GetFrameworkVersion() != "go-planner-v2" {
		t.Fatalf("framework after declare = %q, %v", after.GetFrameworkVersion(), err)
	}
}
