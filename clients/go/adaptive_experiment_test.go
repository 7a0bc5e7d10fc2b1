package memevo_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	memevo "github.com/memevo/memevo/clients/go"
)

// policyArm is an experiment arm called name whose policy is a copy of policy renamed.
func policyArm(policy *memevo.Policy, name string) *memevo.ExperimentArm {
	p := proto.Clone(policy).(*memevo.Policy)
	p.Name = name
	return &memevo.ExperimentArm{Name: name, Policy: p}
}

// The adaptive settings travel in Experiment.Adaptive: Thompson allocation starts from an even split and
// GetStats reports it; automatic promotion without named parameters is refused naming the field.
func TestAdaptiveExperimentSettings(t *testing.T) {
	ctx := ctxT(t)
	policy, err := client.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	arm := func(name string) *memevo.ExperimentArm { return policyArm(policy, name) }
	defer func() {
		if _, err := client.SetExperiment(ctx, &memevo.Experiment{}, memevo.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}()
	adaptive := &memevo.AdaptiveSettings{Allocation: memevo.AllocationModeThompson, FloorShare: 0.1, SnapshotOutcomes: 5}
	running, err := client.SetExperiment(ctx, &memevo.Experiment{
		Name: "go-adaptive", Arms: []*memevo.ExperimentArm{arm("go-a"), arm("go-b")}, Adaptive: adaptive,
	}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if running.GetAdaptive().GetAllocation() != memevo.AllocationModeThompson {
		t.Fatalf("running experiment = %v", running)
	}
	stats, err := client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exp := stats.GetExperiment()
	if exp.GetAllocation() != memevo.AllocationModeThompson || exp.GetPhase() != memevo.ExperimentPhaseRunning ||
		exp.GetControlArm() != "go-a" {
		t.Fatalf("stats experiment = %v", exp)
	}
	for _, a := range exp.GetArms() {
		if a.GetShare() != 0.5 || a.GetProbabilityBest() != 0.5 {
			t.Fatalf("arm %v: want share and P(best) 0.5 before any outcome", a)
		}
	}

	bad := &memevo.AdaptiveSettings{Allocation: memevo.AllocationModeThompson, PromoteProbability: 0.99}
	_, err = client.SetExperiment(ctx, &memevo.Experiment{
		Name: "go-adaptive-bad", Arms: []*memevo.ExperimentArm{arm("go-a"), arm("go-b")}, Adaptive: bad,
	}, memevo.WriteOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrInvalidArgument) ||
		len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "experiment.adaptive.tunable_parameters" {
		t.Fatalf("promotion without tunable parameters: err = %v", err)
	}
}
