package memevo_test

import (
	"errors"
	"slices"
	"testing"

	memevo "github.com/memevo/memevo/clients/go"
)

func TestRestoreUndoesASupersession(t *testing.T) {
	ctx := ctxT(t)
	old, err := client.Remember(ctx, memevo.Input{Content: "restore: the payments runbook, first edition", Vector: axis(5, 0.2)}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replacement, err := client.Remember(ctx, memevo.Input{Content: "restore: a dead-letter queue for failed refunds", Vector: axis(2, 0.9)}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldID, newID := old.Memory.GetId(), replacement.Memory.GetId()
	if old.Outcome != memevo.WriteCreated || replacement.Outcome != memevo.WriteCreated {
		t.Fatalf("writes = %v / %v, want two new memories", old.Outcome, replacement.Outcome)
	}
	if _, err := client.Supersede(ctx, oldID, newID, memevo.SupersedeOptions{Reason: "read as the same slot"}); err != nil {
		t.Fatal(err)
	}
	recalled := func() []uint64 {
		t.Helper()
		found, err := client.Recall(ctx, memevo.VectorQuery(axis(5, 0.2)), memevo.RecallOptions{K: 5})
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, m := range found.GetMemories() {
			ids = append(ids, m.GetMemory().GetId())
		}
		return ids
	}
	if slices.Contains(recalled(), oldID) {
		t.Fatalf("a superseded memory %d was recalled as current", oldID)
	}

	restored, err := client.Restore(ctx, oldID, memevo.RestoreOptions{Reason: "not the same slot", WriteOptions: memevo.WriteOptions{RequestID: "go-restore-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if restored.GetId() != oldID || restored.GetState() != memevo.StateActive || restored.GetSupersededBy() != 0 || restored.GetValidTo() != nil {
		t.Fatalf("restored = %v, want memory %d ACTIVE with no successor", restored, oldID)
	}
	successor, err := client.GetOne(ctx, newID, false)
	if err != nil {
		t.Fatal(err)
	}
	if successor.GetState() != memevo.StateActive || slices.Contains(successor.GetSupersedes(), oldID) {
		t.Fatalf("successor = %v, want it ACTIVE and no longer listing %d", successor, oldID)
	}
	if !slices.Contains(recalled(), oldID) {
		t.Fatalf("the restored memory %d is not recalled as current", oldID)
	}

	again, err := client.Restore(ctx, oldID, memevo.RestoreOptions{Reason: "not the same slot", WriteOptions: memevo.WriteOptions{RequestID: "go-restore-1"}})
	if err != nil || again.GetId() != oldID || again.GetState() != memevo.StateActive {
		t.Fatalf("retry with the same request id = %v, %v; want the first result", again, err)
	}
	_, err = client.Restore(ctx, oldID, memevo.RestoreOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrFailedPrecondition) || merr.Reason != "NOT_RETIRED" {
		t.Fatalf("restoring an ACTIVE memory again: err = %v, want FAILED_PRECONDITION NOT_RETIRED", err)
	}
}

func TestRestoreErrors(t *testing.T) {
	ctx := ctxT(t)
	plain, err := client.Remember(ctx, memevo.Input{Content: "restore: nothing replaced this", Vector: axis(7, 0.3)}, memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.Restore(ctx, plain.Memory.GetId(), memevo.RestoreOptions{})
	var merr *memevo.Error
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrFailedPrecondition) || merr.Reason != "NOT_RETIRED" {
		t.Fatalf("an ACTIVE memory without successor or doubt: err = %v, want FAILED_PRECONDITION NOT_RETIRED", err)
	}

	// A superseded fact whose key now has another current value: supersede that one instead.
	fact := func(value string) memevo.Input {
		return memevo.Input{
			Content: "Noor's shell is " + value, Vector: axis(4, 0.5), Kind: memevo.KindFact,
			Entity: "user:noor", Fact: &memevo.Fact{Attribute: "shell", Value: value},
		}
	}
	bash, err := client.Remember(ctx, fact("bash"), memevo.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SupersedeWith(ctx, bash.Memory.GetId(), fact("fish"), memevo.SupersedeOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = client.Restore(ctx, bash.Memory.GetId(), memevo.RestoreOptions{})
	if !errors.As(err, &merr) || !errors.Is(err, memevo.ErrFailedPrecondition) || merr.Reason != "KEY_HELD" {
		t.Fatalf("a fact whose key is held by its successor: err = %v, want FAILED_PRECONDITION KEY_HELD", err)
	}

	_, err = client.Restore(ctx, 0, memevo.RestoreOptions{})
	if !errors.As(err, &merr) || merr.Code != memevo.ErrInvalidArgument.Code ||
		len(merr.FieldViolations) != 1 || merr.FieldViolations[0].Field != "memory_id" {
		t.Fatalf("no id: err = %v, want INVALID_ARGUMENT naming memory_id", err)
	}
	if _, err = client.Restore(ctx, 1<<62, memevo.RestoreOptions{}); !errors.Is(err, memevo.ErrNotFound) {
		t.Fatalf("an unknown id: err = %v, want NOT_FOUND", err)
	}
}
