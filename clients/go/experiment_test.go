package memevo_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	memevo "github.com/memevo/memevo/clients/go"
)

func TestExperimentSetAndPromote(t *testing.T) {
	ctx := ctxT(t)
	policy, err := client.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	arm := func(name string) *memevo.ExperimentArm { return policyArm(policy, name) }
	if _, err := client.Remember(ctx, memevo.Input{Content: "experiment: retry the flaky upload once", Vector: axis(1, 0.8)}, memevo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	running, err := client.SetExperiment(ctx, &memevo.Experiment{Name: "go-exp", Arms: []*memevo.ExperimentArm{arm("go-control"), arm("go-fresh")}},
		memevo.WriteOptions{RequestID: "go-experiment-1"})
	if err != nil {
		t.Fatal(err)
	}
	if running.GetName() != "go-exp" || len(running.GetArms()) != 2 {
		t.Fatalf("running experiment = %v", running)
	}

	// Every retrieval is ranked by one arm; an outcome counts for that arm.
	const retrievals = 4
	counted := map[string]uint64{}
	var reported string
	for range retrievals {
		found, err := client.Recall(ctx, memevo.VectorQuery(axis(1, 0.8)), memevo.RecallOptions{K: 3})
		if err != nil {
			t.Fatal(err)
		}
		if found.GetArm() != "go-control" && found.GetArm() != "go-fresh" {
			t.Fatalf("recall ranked by arm %q", found.GetArm())
		}
		counted[found.GetArm()]++
		if reported == "" {
			reported = found.GetArm()
			if _, err := client.ReportOutcome(ctx, found.GetRetrievalId(), memevo.OutcomeSuccess, memevo.ReportOutcomeOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stats, err := client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exp := stats.GetExperiment()
	if exp.GetName() != "go-exp" || len(exp.GetArms()) != 2 {
		t.Fatalf("stats experiment = %v", exp)
	}
	for _, a := range exp.GetArms() {
		wantOutcomes := uint64(0)
		if a.GetName() == reported {
			wantOutcomes = 1
		}
		if a.GetShare() != 0.5 || a.GetRetrievalCount() != counted[a.GetName()] || a.GetOutcomeCount() != wantOutcomes {
			t.Fatalf("arm %v: want share 0.5, %d retrievals, %d outcomes", a, counted[a.GetName()], wantOutcomes)
		}
	}

	// An invalid experiment changes nothing.
	_, err = client.SetExperiment(ctx, &memevo.Experiment{Name: "go-bad", Arms: []*memevo.ExperimentArm{arm("twice"), arm("twice")}}, memevo.WriteOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrInvalidArgument) ||
		len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "experiment.arms[1].name" {
		t.Fatalf("duplicate arm names: err = %v, want INVALID_ARGUMENT naming experiment.arms[1].name", err)
	}
	if stats, err := client.Stats(ctx); err != nil || stats.GetExperiment().GetName() != "go-exp" {
		t.Fatalf("after a refused experiment, running = %v, %v; want go-exp still", stats.GetExperiment(), err)
	}

	_, err = client.PromoteArm(ctx, "no-such-arm", memevo.WriteOptions{})
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrNotFound) || merr.Reason != "UNKNOWN_ARM" {
		t.Fatalf("an unknown arm: err = %v, want NOT_FOUND UNKNOWN_ARM", err)
	}
	promoted, err := client.PromoteArm(ctx, "go-fresh", memevo.WriteOptions{RequestID: "go-promote-1"})
	if err != nil {
		t.Fatal(err)
	}
	if promoted.GetPolicy().GetName() != "go-fresh" || promoted.GetFinalStats().GetName() != "go-exp" || len(promoted.GetFinalStats().GetArms()) != 2 {
		t.Fatalf("promote = %v", promoted)
	}
	again, err := client.PromoteArm(ctx, "go-fresh", memevo.WriteOptions{RequestID: "go-promote-1"})
	if err != nil || !proto.Equal(again, promoted) {
		t.Fatalf("retry with the same request id = %v, %v; want the first result", again, err)
	}
	inForce, err := client.GetPolicy(ctx)
	if err != nil || inForce.GetName() != "go-fresh" {
		t.Fatalf("policy after promote = %q, %v", inForce.GetName(), err)
	}
	if stats, err := client.Stats(ctx); err != nil || stats.GetExperiment() != nil {
		t.Fatalf("after promote, experiment = %v, %v; want none", stats.GetExperiment(), err)
	}
	found, err := client.Recall(ctx, memevo.VectorQuery(axis(1, 0.8)), memevo.RecallOptions{K: 3})
	if err != nil || found.GetArm() != "" {
		t.Fatalf("recall after promote: arm %q, %v; want no arm", found.GetArm(), err)
	}

	// No arms ends an experiment.
	if _, err := client.SetExperiment(ctx, &memevo.Experiment{Arms: []*memevo.ExperimentArm{arm("a"), arm("b")}}, memevo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ended, err := client.SetExperiment(ctx, nil, memevo.WriteOptions{})
	if err != nil || len(ended.GetArms()) != 0 {
		t.Fatalf("end the experiment = %v, %v", ended, err)
	}
	if stats, err := client.Stats(ctx); err != nil || stats.GetExperiment() != nil {
		t.Fatalf("after ending, experiment = %v, %v; want none", stats.GetExperiment(), err)
	}
}
