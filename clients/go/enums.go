package memevo

import memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"

// The wire types a caller uses most, so that code using the client needs no import of the
// generated package: memevo.Fact{...} is a *memevov1.Fact, memevo.KindFact a memevov1.MemoryKind.
type (
	Memory            = memevov1.Memory
	Fact              = memevov1.Fact
	FactKey           = memevov1.FactKey
	Policy            = memevov1.Policy
	Experiment        = memevov1.Experiment
	ExperimentArm     = memevov1.ExperimentArm
	ChangeEvent       = memevov1.ChangeEvent
	MemoryKind        = memevov1.MemoryKind
	MemoryState       = memevov1.MemoryState
	MemorySource      = memevov1.MemorySource
	WriteOutcome      = memevov1.WriteOutcome
	RecallMode        = memevov1.RecallMode
	Outcome           = memevov1.Outcome
	ChangeEventType   = memevov1.ChangeEventType
	ProposalKind      = memevov1.ProposalKind
	Verdict           = memevov1.Verdict
	TimeMode          = memevov1.TimeMode
	ConsolidationMode = memevov1.ConsolidationMode
)

// Memory kinds (Input.Kind, Filter.Kinds). The zero value means "not given" (an EPISODE on write).
const (
	KindFact        = memevov1.MemoryKind_MEMORY_KIND_FACT
	KindPreference  = memevov1.MemoryKind_MEMORY_KIND_PREFERENCE
	KindEpisode     = memevov1.MemoryKind_MEMORY_KIND_EPISODE
	KindStrategy    = memevov1.MemoryKind_MEMORY_KIND_STRATEGY
	KindAbstraction = memevov1.MemoryKind_MEMORY_KIND_ABSTRACTION
)

// Memory states (Memory.State).
const (
	StateActive       = memevov1.MemoryState_MEMORY_STATE_ACTIVE
	StateArchived     = memevov1.MemoryState_MEMORY_STATE_ARCHIVED
	StateConsolidated = memevov1.MemoryState_MEMORY_STATE_CONSOLIDATED
	StateObsolete     = memevov1.MemoryState_MEMORY_STATE_OBSOLETE
	StateEvicted      = memevov1.MemoryState_MEMORY_STATE_EVICTED
)

// Where a memory came from (Input.Source). The zero value means "not given" (AGENT_INFERENCE).
const (
	SourceToolResult     = memevov1.MemorySource_MEMORY_SOURCE_TOOL_RESULT
	SourceUserStatement  = memevov1.MemorySource_MEMORY_SOURCE_USER_STATEMENT
	SourceAgentInference = memevov1.MemorySource_MEMORY_SOURCE_AGENT_INFERENCE
	SourceReflection     = memevov1.MemorySource_MEMORY_SOURCE_REFLECTION
	SourceImport         = memevov1.MemorySource_MEMORY_SOURCE_IMPORT
)

// How a write was applied (Written.Outcome).
const (
	WriteCreated            = memevov1.WriteOutcome_WRITE_OUTCOME_CREATED
	WriteConfirmed          = memevov1.WriteOutcome_WRITE_OUTCOME_CONFIRMED
	WriteSupersededPrevious = memevov1.WriteOutcome_WRITE_OUTCOME_SUPERSEDED_PREVIOUS
	WriteBackdated          = memevov1.WriteOutcome_WRITE_OUTCOME_BACKDATED
)

// Recall modes (RecallOptions.Mode, BuildContextOptions.Mode). The zero value means CURRENT.
const (
	RecallCurrent = memevov1.RecallMode_RECALL_MODE_CURRENT
	RecallHistory = memevov1.RecallMode_RECALL_MODE_HISTORY
)

// Outcomes of a retrieval (ReportOutcome).
const (
	OutcomeSuccess = memevov1.Outcome_OUTCOME_SUCCESS
	OutcomeFailure = memevov1.Outcome_OUTCOME_FAILURE
	OutcomePartial = memevov1.Outcome_OUTCOME_PARTIAL
)

// Change-log event types (ChangeEvent.Type, WatchOptions.Types).
const (
	EventCreated           = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_CREATED
	EventUpdated           = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_UPDATED
	EventStateChanged      = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_STATE_CHANGED
	EventSuperseded        = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_SUPERSEDED
	EventEvicted           = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_EVICTED
	EventConsolidated      = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_CONSOLIDATED
	EventUnconsolidated    = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_UNCONSOLIDATED
	EventFrameworkDeclared = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_FRAMEWORK_DECLARED
	EventPolicyUpdated     = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_POLICY_UPDATED
	EventOutcomeReported   = memevov1.ChangeEventType_CHANGE_EVENT_TYPE_OUTCOME_REPORTED
)

// Review proposal kinds (ReviewStream.Hello).
const (
	ProposalConsolidate = memevov1.ProposalKind_PROPOSAL_KIND_CONSOLIDATE
	ProposalEvict       = memevov1.ProposalKind_PROPOSAL_KIND_EVICT
	ProposalReinterpret = memevov1.ProposalKind_PROPOSAL_KIND_REINTERPRET
	ProposalSupersede   = memevov1.ProposalKind_PROPOSAL_KIND_SUPERSEDE
)

// Review verdicts (ReviewStream.Decide; Accept, Reject and Modify set them).
const (
	VerdictAccept = memevov1.Verdict_VERDICT_ACCEPT
	VerdictReject = memevov1.Verdict_VERDICT_REJECT
	VerdictModify = memevov1.Verdict_VERDICT_MODIFY
)

// Policy clocks (Policy.TimeMode).
const (
	TimeWallClock  = memevov1.TimeMode_TIME_MODE_WALL_CLOCK
	TimeAgentTurns = memevov1.TimeMode_TIME_MODE_AGENT_TURNS
)

// What consolidation does without a reviewer (ConsolidationPolicy.WithoutReviewer).
const (
	ConsolidationWait       = memevov1.ConsolidationMode_CONSOLIDATION_MODE_WAIT
	ConsolidationExtractive = memevov1.ConsolidationMode_CONSOLIDATION_MODE_EXTRACTIVE
	ConsolidationLLM        = memevov1.ConsolidationMode_CONSOLIDATION_MODE_LLM
)
