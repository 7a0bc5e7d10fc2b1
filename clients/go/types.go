package memevo

import memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"

// The wire messages a caller builds most, so that code using the client needs no import of the
// generated package: &memevo.Fact{...} is a *memevov1.Fact. The enums' aliases and constants are
// in enums.go (generated).
type (
	Memory        = memevov1.Memory
	Fact          = memevov1.Fact
	FactKey       = memevov1.FactKey
	Policy        = memevov1.Policy
	Experiment    = memevov1.Experiment
	ExperimentArm = memevov1.ExperimentArm
	ChangeEvent   = memevov1.ChangeEvent
	Decision      = memevov1.Decision
	// AdaptiveSettings is an experiment's outcome-driven allocation and automatic promotion.
	AdaptiveSettings = memevov1.AdaptiveSettings
	// ParameterBound is the operator's range for one parameter an experiment may tune (Policy.TuningBounds).
	ParameterBound = memevov1.ParameterBound
)
