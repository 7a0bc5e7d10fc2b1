package memevo_test

import (
	"errors"
	"testing"
	"time"

	memevo "github.com/memevo/memevo/clients/go"
	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

func TestBeliefsIncludeAValueReadFromProse(t *testing.T) {
	ctx := ctxT(t)
	ns := "go-beliefs"
	at := func(s int64) time.Time { return time.Unix(s, 0) }
	keyed, err := client.Remember(ctx, memevo.Input{
		Content: "Ana works at Shopify.", Vector: axis(3, 0.1), Namespace: ns, Kind: memevo.KindFact, Entity: "person:ana",
		Fact: &memevov1.Fact{Attribute: "employer", Value: "Shopify"}, ValidFrom: at(1_000),
	}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prose, err := client.Remember(ctx, memevo.Input{
		Content: "These days Ana works at Canva.", Vector: axis(3, 0.12), Namespace: ns, Kind: memevo.KindFact,
		Entity: "person:ana", ValidFrom: at(2_000),
	}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if prose.Outcome != memevo.WriteSupersededPrevious {
		t.Fatalf("outcome = %v: perception no longer reads this change; pick a wording it reads", prose.Outcome)
	}

	got, err := client.Beliefs(ctx, ns, "person:ana", memevo.BeliefsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetBeliefs()) != 1 {
		t.Fatalf("beliefs = %v, want one (employer)", got.GetBeliefs())
	}
	b := got.GetBeliefs()[0]
	if b.GetAttribute() != "employer" || b.GetValue() != "canva" || !b.GetReadFromText() ||
		b.GetMemory().GetId() != prose.Memory.GetId() || b.GetVersionCount() != 2 {
		t.Fatalf("belief = %v, want employer = canva read from the prose memory %d, 2 versions", b, prose.Memory.GetId())
	}
	if b.GetMemory().GetValidFrom().AsTime().Unix() != 2_000 || b.GetMemory().GetSource() != memevov1.MemorySource_MEMORY_SOURCE_AGENT_INFERENCE {
		t.Fatalf("belief memory = %v, want valid from 2000, agent inference", b.GetMemory())
	}
	history, err := client.HistoryOfFact(ctx, b.GetHistoryKey())
	if err != nil {
		t.Fatal(err)
	}
	if v := history.GetVersions(); len(v) != 2 || v[0].GetId() != keyed.Memory.GetId() || v[1].GetId() != prose.Memory.GetId() {
		t.Fatalf("history of %v = %v, want the keyed then the prose version", b.GetHistoryKey(), v)
	}

	// As of 1500 s, before the prose statement became true: the keyed value, superseded since.
	then, err := client.Beliefs(ctx, ns, "person:ana", memevo.BeliefsOptions{AsOf: at(1_500)})
	if err != nil {
		t.Fatal(err)
	}
	if bs := then.GetBeliefs(); len(bs) != 1 || bs[0].GetValue() != "Shopify" || bs[0].GetReadFromText() ||
		bs[0].GetMemory().GetId() != keyed.Memory.GetId() || bs[0].GetMemory().GetState() != memevov1.MemoryState_MEMORY_STATE_OBSOLETE ||
		then.GetAsOf().AsTime().Unix() != 1_500 {
		t.Fatalf("beliefs as of 1500 = %v, want employer = Shopify from the keyed memory %d (OBSOLETE now)", then, keyed.Memory.GetId())
	}

	listed, err := client.ListEntities(ctx, memevo.ListEntitiesOptions{Namespace: ns, Query: "ANA"})
	if err != nil {
		t.Fatal(err)
	}
	if listed.GetTotalCount() != 1 || len(listed.GetEntities()) != 1 {
		t.Fatalf("entities = %v, want person:ana", listed)
	}
	e := listed.GetEntities()[0]
	if e.GetEntity() != "person:ana" || e.GetMemoryCount() != 2 || e.GetCurrentCount() != 1 || e.GetBeliefCount() != 1 || e.GetLastChangedAt() == nil {
		t.Fatalf("entity = %v, want person:ana with 2 memories, 1 current, 1 belief", e)
	}

	_, err = client.Beliefs(ctx, ns, "", memevo.BeliefsOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrInvalidArgument) || len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "entity" {
		t.Fatalf("Beliefs without an entity: err = %v, want INVALID_ARGUMENT naming entity", err)
	}
}
