package memevo_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	memevo "github.com/memevo/memevo/clients/go"
	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

// TestEveryEnumValueHasAHelper fails when the proto gains an enum value without a constant here.
func TestEveryEnumValueHasAHelper(t *testing.T) {
	helpers := []protoreflect.Enum{
		memevo.KindFact, memevo.KindPreference, memevo.KindEpisode, memevo.KindStrategy, memevo.KindAbstraction,
		memevo.StateActive, memevo.StateArchived, memevo.StateConsolidated, memevo.StateObsolete, memevo.StateEvicted,
		memevo.SourceToolResult, memevo.SourceUserStatement, memevo.SourceAgentInference, memevo.SourceReflection, memevo.SourceImport,
		memevo.WriteCreated, memevo.WriteConfirmed, memevo.WriteSupersededPrevious, memevo.WriteBackdated,
		memevo.RecallCurrent, memevo.RecallHistory,
		memevo.OutcomeSuccess, memevo.OutcomeFailure, memevo.OutcomePartial,
		memevo.EventCreated, memevo.EventUpdated, memevo.EventStateChanged, memevo.EventSuperseded, memevo.EventEvicted,
		memevo.EventConsolidated, memevo.EventUnconsolidated, memevo.EventFrameworkDeclared, memevo.EventPolicyUpdated,
		memevo.EventOutcomeReported,
		memevo.ProposalConsolidate, memevo.ProposalEvict, memevo.ProposalReinterpret, memevo.ProposalSupersede,
		memevo.VerdictAccept, memevo.VerdictReject, memevo.VerdictModify,
		memevo.TimeWallClock, memevo.TimeAgentTurns,
		memevo.ConsolidationWait, memevo.ConsolidationExtractive, memevo.ConsolidationLLM,
	}
	have := map[protoreflect.FullName]bool{}
	for _, h := range helpers {
		name := h.Descriptor().Values().ByNumber(h.Number()).FullName()
		if have[name] {
			t.Errorf("%s has two helpers", name)
		}
		have[name] = true
	}
	files := []protoreflect.FileDescriptor{
		memevov1.File_memevo_v1_events_proto, memevov1.File_memevo_v1_memory_proto,
		memevov1.File_memevo_v1_memory_service_proto, memevov1.File_memevo_v1_policy_proto,
		memevov1.File_memevo_v1_review_proto,
	}
	count := 0
	for _, f := range files {
		for i := range f.Enums().Len() {
			values := f.Enums().Get(i).Values()
			for j := range values.Len() {
				if v := values.Get(j); v.Number() != 0 {
					count++
					if !have[v.FullName()] {
						t.Errorf("%s has no constant in enums.go", v.FullName())
					}
				}
			}
		}
	}
	if count != len(helpers) {
		t.Errorf("%d helpers for %d enum values", len(helpers), count)
	}
}
