package memevo_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	memevo "github.com/memevo/memevo/clients/go"
	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

const reviewNamespace = "go-review"

// nearDuplicates returns n unit vectors around one direction near axis centre (pairwise cosine
// above 0.99, far below 0.9 from a group around another axis), the same for the same seed.
func nearDuplicates(n, centre int, seed uint64) [][]float32 {
	rng := rand.New(rand.NewPCG(seed, 7))
	base := axis(centre, 0.3)
	out := make([][]float32, n)
	for i := range out {
		v := make([]float32, dimension)
		var norm float64
		for j := range v {
			v[j] = base[j] + float32(0.02*rng.NormFloat64())
			norm += float64(v[j]) * float64(v[j])
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(norm))
		}
		out[i] = v
	}
	return out
}

// rememberStrategies stores one STRATEGY memory per vector, all with task signature sig and
// distinct contents (identical contents would be deduplicated, not grouped); returns their ids.
func rememberStrategies(t *testing.T, ctx context.Context, c *memevo.Client, vectors [][]float32, sig string) []uint64 {
	t.Helper()
	ins := make([]memevo.Input, len(vectors))
	for i, v := range vectors {
		ins[i] = memevo.Input{
			Content:       fmt.Sprintf("To %s, run the migration first, then restart the workers (attempt %d).", sig, i),
			Vector:        v,
			Namespace:     reviewNamespace,
			Kind:          memevov1.MemoryKind_MEMORY_KIND_STRATEGY,
			TaskSignature: sig,
		}
	}
	ws, err := c.RememberBatch(ctx, ins, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uint64, len(ws))
	for i, w := range ws {
		ids[i] = w.Memory.GetId()
	}
	return ids
}

// states returns the state of each id (EVICTED for an id Get no longer returns).
func states(t *testing.T, ctx context.Context, c *memevo.Client, ids []uint64) []memevov1.MemoryState {
	t.Helper()
	resp, err := c.Get(ctx, ids, false)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint64]memevov1.MemoryState{}
	for _, m := range resp.GetMemories() {
		byID[m.GetId()] = m.GetState()
	}
	out := make([]memevov1.MemoryState, len(ids))
	for i, id := range ids {
		s, ok := byID[id]
		if !ok {
			s = memevov1.MemoryState_MEMORY_STATE_EVICTED
		}
		out[i] = s
	}
	return out
}

func allIn(got []memevov1.MemoryState, want memevov1.MemoryState) bool {
	for _, s := range got {
		if s != want {
			return false
		}
	}
	return len(got) > 0
}

// waitFor polls cond until it holds; the test fails when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still not true when the test's deadline passed", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func sortedIDs(ms []*memevov1.Memory) []uint64 {
	ids := make([]uint64, len(ms))
	for i, m := range ms {
		ids[i] = m.GetId()
	}
	slices.Sort(ids)
	return ids
}

// nextProposal receives until a proposal arrives (the stream also carries settlements).
func nextProposal(t *testing.T, r *memevo.ReviewStream) *memevov1.Proposal {
	t.Helper()
	for {
		resp, err := r.Recv()
		if err != nil {
			t.Fatalf("waiting for a proposal: %v", err)
		}
		if p := resp.GetProposal(); p != nil {
			return p
		}
	}
}

// nextSettlement receives the next message, which must be a settlement.
func nextSettlement(t *testing.T, r *memevo.ReviewStream) string {
	t.Helper()
	resp, err := r.Recv()
	if err != nil {
		t.Fatalf("waiting for a settlement: %v", err)
	}
	if resp.GetSettledProposalId() == "" {
		t.Fatalf("got %v, want a settled proposal id", resp)
	}
	return resp.GetSettledProposalId()
}

// TestConsolidationReview drives consolidation end to end on a sidecar of its own whose sweeps
// run only on Govern (--sweep-interval-s 0), so every count below is exact: Govern opens a
// proposal that waits for a reviewer, a reviewer attaching later is offered it and applies it to
// a subset, a second group is proposed to the attached reviewer, accepted with the agent's text,
// recalled as one ABSTRACTION, and Unconsolidate brings its members back.
func TestConsolidationReview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sc, err := startSidecar("--sweep-interval-s", "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sc.stop(); err != nil {
			t.Error(err)
		}
	})
	c, err := memevo.NewClient(sc.unix)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reviewStats := func() *memevov1.ReviewStats {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.GetReview()
	}

	// Group A, no reviewer attached: the default policy (WAIT) opens a proposal and changes nothing.
	waiting := rememberStrategies(t, ctx, c, nearDuplicates(5, 1, 1), "triage-alerts")
	dry, err := c.Govern(ctx, memevo.GovernOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.GetSweep().GetEvaluatedCount() < 5 || dry.GetConsolidation().GetProposalsOpened() != 0 {
		t.Fatalf("dry-run govern = %v: want the sweep only, no consolidation pass", dry)
	}
	if open := reviewStats().GetOpenConsolidations(); open != 0 {
		t.Fatalf("a dry run opened %d proposals", open)
	}
	governed, err := c.Govern(ctx, memevo.GovernOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sweep, passed := governed.GetSweep(), governed.GetConsolidation()
	if sweep.GetEvaluatedCount() < 5 || sweep.GetTrigger() == "" {
		t.Fatalf("govern sweep = %v", sweep)
	}
	if passed.GetSeedsExamined() < 5 || passed.GetGroupsFound() != 1 || passed.GetProposalsOpened() != 1 ||
		passed.GetConsolidatedCount() != 0 {
		t.Fatalf("govern consolidation = %v, want 1 group and 1 proposal waiting for a reviewer", passed)
	}
	if got := states(t, ctx, c, waiting); !allIn(got, memevov1.MemoryState_MEMORY_STATE_ACTIVE) {
		t.Fatalf("members of a waiting proposal: %v, want all ACTIVE", got)
	}
	if open := reviewStats().GetOpenConsolidations(); open != 1 {
		t.Fatalf("open consolidations = %d, want 1", open)
	}
	again, err := c.Govern(ctx, memevo.GovernOptions{})
	if err != nil || again.GetConsolidation().GetProposalsOpened() != 0 {
		t.Fatalf("a second govern = %v, %v: want no new proposal while the group is open", again, err)
	}

	reviewCtx, stopReview := context.WithCancel(ctx)
	defer stopReview()
	r, err := c.Review(reviewCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Hello("go-test", memevov1.ProposalKind_PROPOSAL_KIND_CONSOLIDATE); err != nil {
		t.Fatal(err)
	}

	// The open proposal is offered to a reviewer that attaches later. MODIFY applies it to a
	// subset; a late REJECT of the settled proposal changes nothing and is answered with the settlement.
	offered := nextProposal(t, r)
	if offered.GetKind() != memevov1.ProposalKind_PROPOSAL_KIND_CONSOLIDATE ||
		!slices.Equal(sortedIDs(offered.GetMemories()), waiting) {
		t.Fatalf("offered %v, want the consolidation of %v", offered, waiting)
	}
	if err := r.Modify(offered.GetId(), waiting[:3], "Triage alerts by severity.", "only the first three"); err != nil {
		t.Fatal(err)
	}
	if id := nextSettlement(t, r); id != offered.GetId() {
		t.Fatalf("settled %q, want %q", id, offered.GetId())
	}
	partly := func() bool {
		got := states(t, ctx, c, waiting)
		return allIn(got[:3], memevov1.MemoryState_MEMORY_STATE_CONSOLIDATED) && allIn(got[3:], memevov1.MemoryState_MEMORY_STATE_ACTIVE)
	}
	waitFor(t, ctx, "the modified subset consolidated", partly)
	if err := r.Reject(offered.GetId(), "changed my mind"); err != nil {
		t.Fatal(err)
	}
	if id := nextSettlement(t, r); id != offered.GetId() {
		t.Fatalf("late decision settled %q, want %q", id, offered.GetId())
	}
	if !partly() {
		t.Fatalf("a late REJECT changed the settled proposal's memories: %v", states(t, ctx, c, waiting))
	}
	waitFor(t, ctx, "reviewer attached and the first proposal closed", func() bool {
		s := reviewStats()
		return s.GetReviewers() == 1 && s.GetOpenConsolidations() == 0
	})

	// Group B, reviewer attached: Govern proposes it, the reviewer accepts it with its own text.
	vectors := nearDuplicates(6, 5, 2)
	members := rememberStrategies(t, ctx, c, vectors, "deploy-service")
	// Each strategy worked once: the abstraction is then a proven pattern.
	reported, err := c.ReportOutcome(ctx, "", memevov1.Outcome_OUTCOME_SUCCESS, memevo.ReportOutcomeOptions{UsedMemoryIDs: members})
	if err != nil || reported.GetUpdatedCount() != uint64(len(members)) {
		t.Fatalf("report outcome = %v, %v", reported, err)
	}
	governed, err = c.Govern(ctx, memevo.GovernOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := governed.GetConsolidation(); p.GetGroupsFound() != 1 || p.GetProposalsOpened() != 1 {
		t.Fatalf("govern consolidation = %v, want 1 group and 1 proposal", p)
	}
	proposal := nextProposal(t, r)
	if !slices.Equal(sortedIDs(proposal.GetMemories()), members) {
		t.Fatalf("proposal members %v, want %v", sortedIDs(proposal.GetMemories()), members)
	}
	contents := make([]string, len(proposal.GetMemories()))
	for i, m := range proposal.GetMemories() {
		contents[i] = m.GetContent()
	}
	if !slices.Contains(contents, proposal.GetSuggestedText()) || proposal.GetDeadline() == nil || proposal.GetReason() == "" {
		t.Fatalf("proposal = %v: want a member's text as suggestion, a reason and a deadline", proposal)
	}
	text := "Deploys succeed when migrations run before the workers restart."
	if err := r.Accept(proposal.GetId(), text, "merged by the go test"); err != nil {
		t.Fatal(err)
	}
	if id := nextSettlement(t, r); id != proposal.GetId() {
		t.Fatalf("settled %q, want %q", id, proposal.GetId())
	}
	waitFor(t, ctx, "members consolidated", func() bool {
		return allIn(states(t, ctx, c, members), memevov1.MemoryState_MEMORY_STATE_CONSOLIDATED)
	})

	found, err := c.Recall(ctx, memevo.VectorQuery(vectors[0]), memevo.RecallOptions{K: 10, Filter: &memevo.Filter{Namespace: reviewNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	if len(found.GetMemories()) == 0 {
		t.Fatal("recall found nothing")
	}
	top := found.GetMemories()[0]
	abstraction := top.GetMemory()
	members2 := slices.Sorted(slices.Values(abstraction.GetMembers()))
	if abstraction.GetKind() != memevov1.MemoryKind_MEMORY_KIND_ABSTRACTION || abstraction.GetContent() != text ||
		!slices.Equal(members2, members) {
		t.Fatalf("top recall = %v, want the abstraction %q of %v", abstraction, text, members)
	}
	if abstraction.GetSuccesses() != float64(len(members)) {
		t.Fatalf("abstraction successes = %v, want the members' %d", abstraction.GetSuccesses(), len(members))
	}
	if want := fmt.Sprintf("pattern distilled from %d successful experiences", len(members)); top.GetHint() != want {
		t.Fatalf("hint %q, want %q", top.GetHint(), want)
	}
	for _, hit := range found.GetMemories() {
		if slices.Contains(members, hit.GetMemory().GetId()) {
			t.Fatalf("consolidated member %d still recalled as current", hit.GetMemory().GetId())
		}
	}

	// Unconsolidate restores the members; a retry with the same request id gets the first answer.
	for _, attempt := range []string{"first", "retry"} {
		undone, err := c.Unconsolidate(ctx, abstraction.GetId(), memevo.WriteOptions{RequestID: "go-undo-1"})
		if err != nil {
			t.Fatalf("%s unconsolidate: %v", attempt, err)
		}
		if got := slices.Sorted(slices.Values(undone.GetRestoredIds())); !slices.Equal(got, members) {
			t.Fatalf("%s unconsolidate restored %v, want %v", attempt, got, members)
		}
	}
	if got := states(t, ctx, c, members); !allIn(got, memevov1.MemoryState_MEMORY_STATE_ACTIVE) {
		t.Fatalf("members after unconsolidate: %v, want all ACTIVE", got)
	}
	if got := states(t, ctx, c, []uint64{abstraction.GetId()}); got[0] != memevov1.MemoryState_MEMORY_STATE_OBSOLETE {
		t.Fatalf("abstraction after unconsolidate: %v, want OBSOLETE", got[0])
	}
	_, err = c.Unconsolidate(ctx, members[0], memevo.WriteOptions{})
	if !errors.Is(err, memevo.ErrFailedPrecondition) {
		t.Fatalf("unconsolidate of a plain memory: err = %v, want FailedPrecondition", err)
	}

	if err := r.CloseSend(); err != nil {
		t.Fatal(err)
	}
	stopReview()
	waitFor(t, ctx, "reviewer detached", func() bool { return reviewStats().GetReviewers() == 0 })
}

// TestUnconsolidateErrors checks the error mapping on the shared sidecar: no id is a bad
// argument naming the field, an unknown id is not found.
func TestUnconsolidateErrors(t *testing.T) {
	ctx := ctxT(t)
	_, err := client.Unconsolidate(ctx, 0, memevo.WriteOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || merr.Code != codes.InvalidArgument {
		t.Fatalf("unconsolidate(0): err = %v, want InvalidArgument", err)
	}
	if len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "abstraction_id" {
		t.Fatalf("field violations = %+v, want abstraction_id", merr.FieldViolations)
	}
	_, err = client.Unconsolidate(ctx, 1<<40, memevo.WriteOptions{})
	if !errors.Is(err, memevo.ErrNotFound) || errors.Is(err, memevo.ErrInvalidArgument) {
		t.Fatalf("unconsolidate of a missing id: err = %v, want NotFound", err)
	}
}
