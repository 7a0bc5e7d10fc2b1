// Package memevo is the Go client of the memevo sidecar, which governs the memory of a
// long-running LLM agent (memevo.v1.MemoryService over gRPC).
//
// A Client wraps the generated stub (package memevov1) with context deadlines (a default
// timeout when the context has none), typed errors (*Error, matched with errors.As or
// errors.Is against ErrNotFound and friends), vectors as []float32, and Watch as a
// range-over-func iterator:
//
//	c, err := memevo.NewClient("unix:///run/user/1000/memevo.sock")
//	if err != nil { ... }
//	defer c.Close()
//	w, err := c.Remember(ctx, memevo.Input{Content: "Alice prefers tea", Vector: v}, memevo.WriteOptions{})
//	found, err := c.Recall(ctx, memevo.VectorQuery(v), memevo.RecallOptions{K: 5})
//	for ev, err := range c.Watch(ctx, memevo.WatchOptions{AfterSequence: memevo.Ptr[uint64](0)}) { ... }
package memevo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/timestamppb"

	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

const (
	// DefaultTimeout is the deadline of unary and client-streaming calls whose context has none.
	DefaultTimeout = 10 * time.Second
	// MaxMessageBytes is the largest message the client sends or accepts: 64 MiB, the sidecar's limit.
	MaxMessageBytes = 64 << 20
	// WatchBackoffInitial is the first delay before a resuming Watch reconnects; it doubles up to WatchBackoffMax.
	WatchBackoffInitial = 100 * time.Millisecond
	// WatchBackoffMax is the longest delay between Watch reconnect attempts.
	WatchBackoffMax = 5 * time.Second
	// WatchMaxAttempts is the number of consecutive failed reconnects after which a resuming Watch gives up.
	WatchMaxAttempts = 10
	// ReconnectBackoffInitial is the first delay before the connection reconnects to a sidecar it lost.
	ReconnectBackoffInitial = 100 * time.Millisecond
	// ReconnectBackoffMax is the longest delay between reconnect attempts: a restarted sidecar is
	// answered at most this long after it serves again.
	ReconnectBackoffMax = time.Second
)

// DefaultTarget is the address NewClient("") talks to: $MEMEVO_ADDRESS when set, else the socket
// `memevo serve` listens on by default (unix://$XDG_RUNTIME_DIR/memevo-UID.sock, /tmp without
// $XDG_RUNTIME_DIR).
func DefaultTarget() string {
	if address := os.Getenv("MEMEVO_ADDRESS"); address != "" {
		return address
	}
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = "/tmp"
	}
	return fmt.Sprintf("unix://%s/memevo-%d.sock", base, os.Getuid())
}

// Ptr returns a pointer to v, for the optional fields (Turn, AfterSequence, Confidence).
func Ptr[T any](v T) *T { return &v }

type settings struct {
	timeout      time.Duration
	token        string
	waitForReady bool
	dialOptions  []grpc.DialOption
}

// Option configures NewClient.
type Option func(*settings)

// WithTimeout sets the deadline of calls whose context has none (default DefaultTimeout).
// Watch and Review never get one: they live as long as their context.
func WithTimeout(d time.Duration) Option { return func(s *settings) { s.timeout = d } }

// WithToken sends "authorization: Bearer <token>" on every call (the sidecar's --token-file).
func WithToken(token string) Option { return func(s *settings) { s.token = token } }

// WithWaitForReady makes calls wait (up to their deadline) for an unreachable sidecar instead of
// failing at once with Unavailable.
func WithWaitForReady(wait bool) Option { return func(s *settings) { s.waitForReady = wait } }

// WithDialOptions adds grpc dial options, applied after the client's own.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(s *settings) { s.dialOptions = append(s.dialOptions, opts...) }
}

// Client talks to one memevo sidecar over one connection; it is safe for concurrent use.
type Client struct {
	conn     *grpc.ClientConn
	stub     memevov1.MemoryServiceClient
	timeout  time.Duration
	callOpts []grpc.CallOption
}

// NewClient creates a client of the sidecar at target: "unix:///absolute/path.sock" or "host:port";
// "" means DefaultTarget(). It does not connect until the first call.
func NewClient(target string, opts ...Option) (*Client, error) {
	if target == "" {
		target = DefaultTarget()
	}
	if strings.TrimSpace(target) == "" {
		return nil, errors.New("memevo: target must be 'unix:///absolute/path.sock' or 'host:port'")
	}
	if strings.HasPrefix(target, "unix://") && !strings.HasPrefix(target, "unix:///") {
		return nil, fmt.Errorf("memevo: %q: a unix socket target needs an absolute path, e.g. unix:///run/memevo.sock", target)
	}
	s := settings{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&s)
	}
	if s.timeout <= 0 {
		return nil, fmt.Errorf("memevo: timeout must be positive, got %v", s.timeout)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("memevo-go"),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		// Pings find a peer that vanished without closing the socket, which would otherwise leave a
		// Watch hanging forever; 6 minutes stays above the 5-minute minimum a default server enforces.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 6 * time.Minute, Timeout: 20 * time.Second}),
		// gRPC's reconnect backoff starts at 1 s and grows x1.6 per failed attempt up to 2 minutes, so a
		// client that kept calling through a sidecar restart failed on for seconds after the sidecar was
		// back. An attempt at a local sidecar costs one refused connect; 0.1 s growing to at most 1 s
		// keeps that cheap. MinConnectTimeout stays gRPC's: it bounds one attempt, not the wait between.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{
				BaseDelay:  ReconnectBackoffInitial,
				Multiplier: grpcbackoff.DefaultConfig.Multiplier,
				Jitter:     grpcbackoff.DefaultConfig.Jitter,
				MaxDelay:   ReconnectBackoffMax,
			},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if s.token != "" {
		if strings.ContainsAny(s.token, "\r\n") {
			return nil, errors.New("memevo: token must not contain line breaks")
		}
		dial = append(dial, grpc.WithPerRPCCredentials(bearer(s.token)))
	}
	conn, err := grpc.NewClient(target, append(dial, s.dialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("memevo: %w", err)
	}
	c := &Client{conn: conn, stub: memevov1.NewMemoryServiceClient(conn), timeout: s.timeout}
	if s.waitForReady {
		c.callOpts = append(c.callOpts, grpc.WaitForReady(true))
	}
	return c, nil
}

// Close closes the connection; calls in flight are cancelled.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying connection, e.g. for the grpc.health.v1 or reflection clients.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Raw is the generated stub on the same connection, for what the wrapper does not cover.
// Its errors are plain gRPC statuses: FromError turns them into *Error.
func (c *Client) Raw() memevov1.MemoryServiceClient { return c.stub }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// The sidecar listens on a unix socket or loopback; the token guards against other local users.
func (bearer) RequireTransportSecurity() bool { return false }

// withDeadline gives ctx the client's default timeout when it has no deadline.
func (c *Client) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}

func unary[Req, Resp any](
	c *Client, ctx context.Context, call func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
) (Resp, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	resp, err := call(ctx, req, c.callOpts...)
	if err != nil {
		var zero Resp
		return zero, FromError(err)
	}
	return resp, nil
}

// --- inputs ----------------------------------------------------------------------------------

// Input is a memory to store: Content, or Vector, or both; every other field is optional.
// See memevov1.MemoryInput for each field's unit and default.
type Input struct {
	// Content is the memory's text; the sidecar embeds it when Vector is empty.
	Content string
	// Vector has exactly the data directory's dimension; sent as packed little-endian float32.
	Vector []float32
	// Namespace defaults to "default".
	Namespace string
	// Kind defaults to MEMORY_KIND_EPISODE.
	Kind memevov1.MemoryKind
	// Entity the memory is about, e.g. "user:alice".
	Entity string
	Topic  string
	// Fact is a structured fact about Entity (requires Entity).
	Fact *memevov1.Fact
	// Source defaults to MEMORY_SOURCE_AGENT_INFERENCE.
	Source memevov1.MemorySource
	// Confidence in [0, 1]; nil uses the policy's starting confidence for Source.
	Confidence *float32
	// Importance from 1 to 10; 0 = not given.
	Importance uint32
	Tags       []string
	Metadata   map[string]string
	// ValidFrom is world time: when this became true. Zero: the sidecar's time of the write.
	ValidFrom        time.Time
	FrameworkVersion string
	ReasoningContext *memevov1.ReasoningContext
	// TaskSignature is the task a MEMORY_KIND_STRATEGY memory solves.
	TaskSignature string
}

// Proto converts the input to its wire form.
func (in Input) Proto() *memevov1.MemoryInput {
	return &memevov1.MemoryInput{
		Content:          in.Content,
		Vector:           EncodeVector(in.Vector),
		Namespace:        in.Namespace,
		Kind:             in.Kind,
		Entity:           in.Entity,
		Topic:            in.Topic,
		Fact:             in.Fact,
		Source:           in.Source,
		Confidence:       in.Confidence,
		Importance:       in.Importance,
		Tags:             in.Tags,
		Metadata:         in.Metadata,
		ValidFrom:        timestamp(in.ValidFrom),
		FrameworkVersion: in.FrameworkVersion,
		ReasoningContext: in.ReasoningContext,
		TaskSignature:    in.TaskSignature,
	}
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// WriteOptions are the options every mutating call shares.
type WriteOptions struct {
	// RequestID is an idempotency key (at most 128 bytes): a retry with the same id returns the first call's result.
	RequestID string
	// Turn is the agent's current turn counter; nil when unknown.
	Turn *int64
}

// Written is the result of storing one memory.
type Written struct {
	// Memory is the stored (or confirmed) memory, without its vector.
	Memory  *memevov1.Memory
	Outcome memevov1.WriteOutcome
	// AffectedIDs are other memories the write changed (e.g. the one it superseded).
	AffectedIDs []uint64
	// Replayed is true when the request id matched an earlier call and this is that call's result.
	Replayed bool
}

func written(r *memevov1.WriteResult, replayed bool) Written {
	return Written{Memory: r.GetMemory(), Outcome: r.GetOutcome(), AffectedIDs: r.GetAffectedIds(), Replayed: replayed}
}

// --- writes ----------------------------------------------------------------------------------

// Remember stores one memory and returns once it is durable.
func (c *Client) Remember(ctx context.Context, in Input, o WriteOptions) (Written, error) {
	resp, err := unary(c, ctx, c.stub.Remember, &memevov1.RememberRequest{Memory: in.Proto(), RequestId: o.RequestID, Turn: o.Turn})
	if err != nil {
		return Written{}, err
	}
	return written(resp.GetResult(), resp.GetReplayed()), nil
}

// RememberBatch stores several memories, all or nothing: one bad item rejects the whole batch
// (an *Error with code InvalidArgument naming the item, e.g. "memories[3].vector").
func (c *Client) RememberBatch(ctx context.Context, ins []Input, o WriteOptions) ([]Written, error) {
	req := &memevov1.RememberBatchRequest{RequestId: o.RequestID, Turn: o.Turn}
	for _, in := range ins {
		req.Memories = append(req.Memories, in.Proto())
	}
	resp, err := unary(c, ctx, c.stub.RememberBatch, req)
	if err != nil {
		return nil, err
	}
	out := make([]Written, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		out[i] = written(r, resp.GetReplayed())
	}
	return out, nil
}

// StreamItem is one memory of RememberStream, with its own idempotency key and turn.
type StreamItem struct {
	Input
	// RequestID of this item: give every item one and a failed stream can be resent whole.
	RequestID string
	Turn      *int64
}

// StreamGroupItems is how many items RememberStream puts in one message at most.
const StreamGroupItems = 64

func sameTurn(a, b *int64) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// RememberStream streams memories to the sidecar, which commits them in groups as they arrive.
// A bad item ends the stream with InvalidArgument; the *Error's Metadata["committed_count"] says
// how many items before it were stored.
func (c *Client) RememberStream(ctx context.Context, items iter.Seq[StreamItem]) (*memevov1.RememberStreamResponse, error) {
	ctx, cancel := c.withDeadline(ctx)
	defer cancel()
	stream, err := c.stub.RememberStream(ctx, c.callOpts...)
	if err != nil {
		return nil, FromError(err)
	}
	// Items travel StreamGroupItems to a message (one turn per message): the sidecar pays a fixed
	// cost per message, which one item per message made the limit of a bulk load.
	var group []*memevov1.RememberStreamItem
	var groupTurn *int64
	send := func() error {
		if len(group) == 0 {
			return nil
		}
		err := stream.Send(&memevov1.RememberStreamRequest{Items: group, Turn: groupTurn})
		group = nil
		return err
	}
	for item := range items {
		if len(group) > 0 && !sameTurn(item.Turn, groupTurn) {
			if err = send(); err != nil {
				break
			}
		}
		groupTurn = item.Turn
		group = append(group, &memevov1.RememberStreamItem{Memory: item.Proto(), RequestId: item.RequestID})
		if len(group) >= StreamGroupItems {
			if err = send(); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = send()
	}
	if err != nil && !errors.Is(err, io.EOF) { // EOF: the sidecar ended the stream; CloseAndRecv returns why
		return nil, FromError(err)
	}
	resp, err := stream.CloseAndRecv()
	return resp, FromError(err)
}

// ForgetOptions are the options of Forget.
type ForgetOptions struct {
	WriteOptions
	// Reason is kept in the change log (at most 4 KiB).
	Reason string
	// KeepHistory marks the memories OBSOLETE instead of deleting them.
	KeepHistory bool
}

// Forget deletes memories (or keeps them as OBSOLETE history); unknown ids come back in MissingIds.
func (c *Client) Forget(ctx context.Context, ids []uint64, o ForgetOptions) (*memevov1.ForgetResponse, error) {
	return unary(c, ctx, c.stub.Forget, &memevov1.ForgetRequest{
		Ids: ids, Reason: o.Reason, KeepHistory: o.KeepHistory, RequestId: o.RequestID, Turn: o.Turn,
	})
}

// SupersedeOptions are the options of Supersede and SupersedeWith.
type SupersedeOptions struct {
	WriteOptions
	// Reason is kept in the change log.
	Reason string
}

// Supersede declares that the existing memory newID replaces oldID.
func (c *Client) Supersede(ctx context.Context, oldID, newID uint64, o SupersedeOptions) (*memevov1.SupersedeResponse, error) {
	return unary(c, ctx, c.stub.Supersede, &memevov1.SupersedeRequest{
		OldId: oldID, Replacement: &memevov1.SupersedeRequest_NewId{NewId: newID},
		Reason: o.Reason, RequestId: o.RequestID, Turn: o.Turn,
	})
}

// SupersedeWith stores a new memory that replaces oldID.
func (c *Client) SupersedeWith(ctx context.Context, oldID uint64, in Input, o SupersedeOptions) (*memevov1.SupersedeResponse, error) {
	return unary(c, ctx, c.stub.Supersede, &memevov1.SupersedeRequest{
		OldId: oldID, Replacement: &memevov1.SupersedeRequest_NewMemory{NewMemory: in.Proto()},
		Reason: o.Reason, RequestId: o.RequestID, Turn: o.Turn,
	})
}

// ReportOutcomeOptions are the options of ReportOutcome.
type ReportOutcomeOptions struct {
	WriteOptions
	// UsedMemoryIDs are the memories the agent actually used; default all the retrieval returned.
	UsedMemoryIDs []uint64
	// Note is kept in the change log (at most 4 KiB).
	Note string
	// Reward is a graded outcome in [-1, 1] (1 = full success, -1 = full failure) that replaces
	// the weight the outcome implies; nil: not given.
	Reward *float32
	// Namespace confines the outcome: a retrieval of another namespace is NotFound, UsedMemoryIDs
	// outside it InvalidArgument; "": confined only by the token's namespaces.
	Namespace string
}

// ReportOutcome tells the sidecar whether the memories of a retrieval (the RetrievalId of a
// Recall or BuildContext) helped.
func (c *Client) ReportOutcome(ctx context.Context, retrievalID string, outcome memevov1.Outcome, o ReportOutcomeOptions) (*memevov1.ReportOutcomeResponse, error) {
	return unary(c, ctx, c.stub.ReportOutcome, &memevov1.ReportOutcomeRequest{
		RetrievalId: retrievalID, Outcome: outcome, UsedMemoryIds: o.UsedMemoryIDs,
		Note: o.Note, RequestId: o.RequestID, Turn: o.Turn, Reward: o.Reward, Namespace: o.Namespace,
	})
}

// Unconsolidate undoes a consolidation: the members become ACTIVE again, the abstraction OBSOLETE.
func (c *Client) Unconsolidate(ctx context.Context, abstractionID uint64, o WriteOptions) (*memevov1.UnconsolidateResponse, error) {
	return unary(c, ctx, c.stub.Unconsolidate, &memevov1.UnconsolidateRequest{AbstractionId: abstractionID, RequestId: o.RequestID})
}

// RestoreOptions are the options of Restore.
type RestoreOptions struct {
	WriteOptions
	// Reason is kept in the change log (at most 4 KiB).
	Reason string
}

// Restore undoes a supersession (the memory is ACTIVE again with no successor; its successor stays
// current) or a doubt (PossiblyOutdatedBy cleared), e.g. for a plain-text statement the sidecar's
// perception read as another slot's. It returns the restored memory. An error matching
// ErrFailedPrecondition when the memory is neither superseded nor doubted, or when its fact key
// has another current value (supersede that one instead); ErrNotFound for an unknown id.
func (c *Client) Restore(ctx context.Context, id uint64, o RestoreOptions) (*memevov1.Memory, error) {
	resp, err := unary(c, ctx, c.stub.Restore, &memevov1.RestoreRequest{
		MemoryId: id, Reason: o.Reason, RequestId: o.RequestID, Turn: o.Turn,
	})
	return resp.GetMemory(), err
}

// DeclareFramework declares a new cognitive-framework version; older memories are flagged for re-interpretation.
func (c *Client) DeclareFramework(ctx context.Context, version, description string, o WriteOptions) (*memevov1.DeclareFrameworkResponse, error) {
	return unary(c, ctx, c.stub.DeclareFramework, &memevov1.DeclareFrameworkRequest{
		Version: version, Description: description, RequestId: o.RequestID, Turn: o.Turn,
	})
}

// UpdatePolicy replaces the governance policy and returns the policy now in force.
func (c *Client) UpdatePolicy(ctx context.Context, policy *memevov1.Policy, o WriteOptions) (*memevov1.Policy, error) {
	resp, err := unary(c, ctx, c.stub.UpdatePolicy, &memevov1.UpdatePolicyRequest{Policy: policy, RequestId: o.RequestID})
	return resp.GetPolicy(), err
}

// SetExperiment starts (or replaces) an online experiment: 2 to 16 arms, each a policy ranking its
// share of retrievals (chosen by a hash of the retrieval id), with per-arm counts reset. An
// experiment with no arms (or nil) ends the running one. It returns the experiment now running.
// An invalid experiment is an error matching ErrInvalidArgument naming each bad field, and
// changes nothing. The arm that ranked a retrieval is its Arm; Stats().GetExperiment() has the
// per-arm outcomes.
// Experiment.Adaptive (AdaptiveSettings) asks for outcome-driven traffic and automatic promotion with
// rollback; the decisions are in Stats().GetExperiment().GetDecisions() and the change log.
func (c *Client) SetExperiment(ctx context.Context, experiment *memevov1.Experiment, o WriteOptions) (*memevov1.Experiment, error) {
	resp, err := unary(c, ctx, c.stub.SetExperiment, &memevov1.SetExperimentRequest{Experiment: experiment, RequestId: o.RequestID})
	return resp.GetExperiment(), err
}

// PromoteArm makes the named arm's policy the data directory's policy and ends the experiment.
// The response has the policy now in force (GetPolicy) and the experiment's per-arm outcomes at
// its end (GetFinalStats). An error matching ErrNotFound when no running arm has that name.
func (c *Client) PromoteArm(ctx context.Context, arm string, o WriteOptions) (*memevov1.PromoteArmResponse, error) {
	return unary(c, ctx, c.stub.PromoteArm, &memevov1.PromoteArmRequest{Arm: arm, RequestId: o.RequestID})
}

// GovernOptions are the options of Govern.
type GovernOptions struct {
	// DryRun computes transitions without applying them.
	DryRun bool
	// Namespace restricts the sweep; empty: all.
	Namespace string
	Turn      *int64
}

// Govern runs a governance sweep now. The response has the sweep's statistics (GetSweep) and,
// unless DryRun, those of the consolidation pass run with it (GetConsolidation: groups found,
// proposals opened for review, abstractions written by policy, proposals expired).
func (c *Client) Govern(ctx context.Context, o GovernOptions) (*memevov1.GovernResponse, error) {
	return unary(c, ctx, c.stub.Govern, &memevov1.GovernRequest{DryRun: o.DryRun, Namespace: o.Namespace, Turn: o.Turn})
}

// --- reads -----------------------------------------------------------------------------------

// Query is what Recall and BuildContext look for: a text (embedded by the sidecar) or a vector.
type Query struct {
	Text   string
	Vector []float32
}

// TextQuery is a query by text.
func TextQuery(text string) Query { return Query{Text: text} }

// VectorQuery is a query by vector.
func VectorQuery(v []float32) Query { return Query{Vector: v} }

// Filter narrows Recall and BuildContext; zero fields filter nothing.
type Filter struct {
	// Namespace defaults to "default".
	Namespace string
	Kinds     []memevov1.MemoryKind
	Entity    string
	// Tags must all be present.
	Tags []string
	// ValidFromAfter and ValidFromBefore bound world time (when the memory became true).
	ValidFromAfter, ValidFromBefore time.Time
}

func (f *Filter) proto() *memevov1.RecallFilter {
	if f == nil {
		return nil
	}
	return &memevov1.RecallFilter{
		Namespace: f.Namespace, Kinds: f.Kinds, Entity: f.Entity, Tags: f.Tags,
		ValidFromAfter: timestamp(f.ValidFromAfter), ValidFromBefore: timestamp(f.ValidFromBefore),
	}
}

// RecallOptions are the options of Recall.
type RecallOptions struct {
	// K is the number of memories to return; 0 means 10.
	K      uint32
	Filter *Filter
	// Mode defaults to RECALL_MODE_CURRENT.
	Mode            memevov1.RecallMode
	IncludeArchived bool
	// AsOf answers as of this world time; zero: now.
	AsOf           time.Time
	IncludeVectors bool
	Turn           *int64
	// Diversity in [0, 1) pushes near-duplicates of better-ranked memories down (maximal marginal
	// relevance); 0 ranks by score alone.
	Diversity float32
	// Peek looks without using: no access is counted and no retrieval recorded (the response has no
	// RetrievalId), for tools that inspect memory rather than act on it.
	Peek bool
}

// Recall finds the memories that answer a query, best first.
func (c *Client) Recall(ctx context.Context, q Query, o RecallOptions) (*memevov1.RecallResponse, error) {
	return unary(c, ctx, c.stub.Recall, &memevov1.RecallRequest{
		Query: q.Text, QueryVector: EncodeVector(q.Vector), K: o.K, Filter: o.Filter.proto(), Mode: o.Mode,
		IncludeArchived: o.IncludeArchived, AsOf: timestamp(o.AsOf), IncludeVectors: o.IncludeVectors, Turn: o.Turn,
		Diversity: o.Diversity, Peek: o.Peek,
	})
}

// BuildContextOptions are the options of BuildContext.
type BuildContextOptions struct {
	// TokenBudget is the maximum tokens of the rendered text; 0 means 2000.
	TokenBudget uint32
	// Language of the hints: "en" (default) or "zh".
	Language string
	Filter   *Filter
	Mode     memevov1.RecallMode
	AsOf     time.Time
	Turn     *int64
}

// BuildContext builds an annotated context block for a prompt within a token budget.
func (c *Client) BuildContext(ctx context.Context, q Query, o BuildContextOptions) (*memevov1.BuildContextResponse, error) {
	return unary(c, ctx, c.stub.BuildContext, &memevov1.BuildContextRequest{
		Query: q.Text, QueryVector: EncodeVector(q.Vector), TokenBudget: o.TokenBudget, Language: o.Language,
		Filter: o.Filter.proto(), Mode: o.Mode, AsOf: timestamp(o.AsOf), Turn: o.Turn,
	})
}

// Get reads memories by id, in any state but EVICTED; unknown ids come back in MissingIds.
func (c *Client) Get(ctx context.Context, ids []uint64, includeVectors bool) (*memevov1.GetResponse, error) {
	return unary(c, ctx, c.stub.Get, &memevov1.GetRequest{Ids: ids, IncludeVectors: includeVectors})
}

// GetOne reads one memory; an error matching ErrNotFound when it does not exist or was evicted.
func (c *Client) GetOne(ctx context.Context, id uint64, includeVectors bool) (*memevov1.Memory, error) {
	resp, err := c.Get(ctx, []uint64{id}, includeVectors)
	if err != nil {
		return nil, err
	}
	if len(resp.GetMemories()) == 0 {
		return nil, &Error{Code: ErrNotFound.Code, Message: fmt.Sprintf("memory %d does not exist or was evicted", id)}
	}
	return resp.GetMemories()[0], nil
}

// HistoryOfFact returns every version of a fact key, oldest first, with the change-log events about them.
func (c *Client) HistoryOfFact(ctx context.Context, key *memevov1.FactKey) (*memevov1.HistoryResponse, error) {
	return unary(c, ctx, c.stub.History, &memevov1.HistoryRequest{Subject: &memevov1.HistoryRequest_FactKey{FactKey: key}})
}

// HistoryOfMemory returns the lineage of a memory: what it replaced and what replaced it.
func (c *Client) HistoryOfMemory(ctx context.Context, id uint64) (*memevov1.HistoryResponse, error) {
	return unary(c, ctx, c.stub.History, &memevov1.HistoryRequest{Subject: &memevov1.HistoryRequest_MemoryId{MemoryId: id}})
}

// Stats returns counts, index status, the last change-log sequence and the last sweeps.
func (c *Client) Stats(ctx context.Context) (*memevov1.GetStatsResponse, error) {
	return unary(c, ctx, c.stub.GetStats, &memevov1.GetStatsRequest{})
}

// GetPolicy returns the governance policy in force.
func (c *Client) GetPolicy(ctx context.Context) (*memevov1.Policy, error) {
	resp, err := unary(c, ctx, c.stub.GetPolicy, &memevov1.GetPolicyRequest{})
	return resp.GetPolicy(), err
}

// --- streams ---------------------------------------------------------------------------------

// WatchOptions are the options of Watch.
type WatchOptions struct {
	// AfterSequence delivers events with a sequence above it; Ptr[uint64](0) replays the whole log.
	// nil: only events after the call.
	AfterSequence *uint64
	// Namespace keeps only its events (sidecar-wide events always come); empty: all.
	Namespace string
	// Types keeps only these event types; empty: all.
	Types []memevov1.ChangeEventType
	// Resume reconnects from the last delivered sequence when the stream is cut with Unavailable
	// or ended by a sidecar shutting down, so no event is lost or repeated.
	Resume bool
	// MaxAttempts is the number of consecutive failed reconnects before giving up; 0 means WatchMaxAttempts.
	MaxAttempts int
}

// Watch streams change-log events, then live ones, for as long as ctx lives (no default deadline):
//
//	for ev, err := range c.Watch(ctx, memevo.WatchOptions{}) {
//		if err != nil { ... } // the last value; the stream is over
//		...
//	}
//
// Breaking out of the loop cancels the call. A cancelled or expired ctx ends the loop with an
// error matching ErrCanceled or ErrDeadlineExceeded.
func (c *Client) Watch(ctx context.Context, o WatchOptions) iter.Seq2[*memevov1.ChangeEvent, error] {
	return func(yield func(*memevov1.ChangeEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		maxAttempts := o.MaxAttempts
		if maxAttempts <= 0 {
			maxAttempts = WatchMaxAttempts
		}
		after := o.AfterSequence
		if o.Resume && after == nil {
			// A reconnect needs a place to resume from: the log's end now.
			stats, err := c.Stats(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			after = Ptr(stats.GetLastSequence())
		}
		failures := 0
		for {
			err := c.watchOnce(ctx, o, &after, &failures, yield)
			if err == errStop {
				return
			}
			var typed *Error
			reconnect := o.Resume && failures < maxAttempts && ctx.Err() == nil &&
				(err == nil || (errors.As(err, &typed) && typed.Code == ErrUnavailable.Code))
			if !reconnect {
				if err != nil {
					yield(nil, err)
				}
				return
			}
			failures++
			timer := time.NewTimer(backoff(failures))
			select {
			case <-ctx.Done():
				timer.Stop()
				yield(nil, FromError(ctx.Err()))
				return
			case <-timer.C:
			}
		}
	}
}

var errStop = errors.New("stop")

// watchOnce runs one Watch call: nil for a clean end by the sidecar, errStop when the consumer stopped.
func (c *Client) watchOnce(
	ctx context.Context, o WatchOptions, after **uint64, failures *int, yield func(*memevov1.ChangeEvent, error) bool,
) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.stub.Watch(ctx, &memevov1.WatchRequest{AfterSequence: *after, Namespace: o.Namespace, Types: o.Types}, c.callOpts...)
	if err != nil {
		return FromError(err)
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return FromError(err)
		}
		ev := resp.GetEvent()
		if ev == nil {
			continue
		}
		*after = Ptr(ev.GetSequence())
		*failures = 0
		if !yield(ev, nil) {
			return errStop
		}
	}
}

func backoff(attempt int) time.Duration {
	d := WatchBackoffInitial << min(attempt-1, 30)
	if d > WatchBackoffMax || d <= 0 {
		d = WatchBackoffMax
	}
	return time.Duration(float64(d) * (0.5 + rand.Float64()/2)) // jitter against reconnect stampedes
}

// ReviewStream is one Review conversation: send Hello first, then one Decide per proposal received.
type ReviewStream struct {
	stream grpc.BidiStreamingClient[memevov1.ReviewRequest, memevov1.ReviewResponse]
}

// Review opens the bidirectional Review stream; it lives as long as ctx (no default deadline).
func (c *Client) Review(ctx context.Context) (*ReviewStream, error) {
	stream, err := c.stub.Review(ctx, c.callOpts...)
	if err != nil {
		return nil, FromError(err)
	}
	return &ReviewStream{stream: stream}, nil
}

// Hello sends the first message: who reviews and which proposal kinds it takes (none: all).
func (r *ReviewStream) Hello(reviewer string, kinds ...memevov1.ProposalKind) error {
	return r.Send(&memevov1.ReviewRequest{Message: &memevov1.ReviewRequest_Hello{Hello: &memevov1.ReviewerHello{Reviewer: reviewer, Kinds: kinds}}})
}

// Decide answers one proposal. The sidecar answers with a ReviewResponse whose
// SettledProposalId is the proposal's id (also for a late decision on a proposal already settled).
func (r *ReviewStream) Decide(d *memevov1.Decision) error {
	return r.Send(&memevov1.ReviewRequest{Message: &memevov1.ReviewRequest_Decision{Decision: d}})
}

// Accept applies a proposal whole. For a consolidation, abstractionText is the abstraction's
// text (written by the agent's LLM); for other kinds it is ignored. note goes to the change log.
func (r *ReviewStream) Accept(proposalID, abstractionText, note string) error {
	return r.Decide(&memevov1.Decision{
		ProposalId: proposalID, Verdict: memevov1.Verdict_VERDICT_ACCEPT, AbstractionText: abstractionText, Note: note,
	})
}

// Reject declines a proposal: its memories stay as they are.
func (r *ReviewStream) Reject(proposalID, note string) error {
	return r.Decide(&memevov1.Decision{ProposalId: proposalID, Verdict: memevov1.Verdict_VERDICT_REJECT, Note: note})
}

// Modify applies a proposal to memoryIDs only (a subset of its memories); abstractionText as for Accept.
// An id outside the proposal ends the stream with InvalidArgument (field decision.memory_ids).
func (r *ReviewStream) Modify(proposalID string, memoryIDs []uint64, abstractionText, note string) error {
	return r.Decide(&memevov1.Decision{
		ProposalId: proposalID, Verdict: memevov1.Verdict_VERDICT_MODIFY, MemoryIds: memoryIDs,
		AbstractionText: abstractionText, Note: note,
	})
}

// Send sends a raw ReviewRequest. An io.EOF means the sidecar ended the stream: Recv says why.
func (r *ReviewStream) Send(req *memevov1.ReviewRequest) error {
	err := r.stream.Send(req)
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	return FromError(err)
}

// Recv returns the next proposal or settled proposal id; io.EOF when the sidecar ended the stream cleanly.
func (r *ReviewStream) Recv() (*memevov1.ReviewResponse, error) {
	resp, err := r.stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	return resp, FromError(err)
}

// CloseSend half-closes the stream: no more decisions.
func (r *ReviewStream) CloseSend() error { return r.stream.CloseSend() }
