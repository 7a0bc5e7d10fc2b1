package memevo

import (
	"context"
	"time"

	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

// ListEntitiesOptions are the options of ListEntities.
type ListEntitiesOptions struct {
	// Namespace to list; empty means "default".
	Namespace string
	// Query keeps the entities whose id contains it, ignoring case; empty keeps all.
	Query string
	// Limit is how many entities to return, 1 to the sidecar's max_k; 0 means 100.
	Limit uint32
}

// ListEntities returns the entities of a namespace, most recently changed first, each with its memory
// counts (current, with a belief, doubted) and last change; TotalCount says how many matched.
func (c *Client) ListEntities(ctx context.Context, o ListEntitiesOptions) (*memevov1.ListEntitiesResponse, error) {
	return unary(c, ctx, c.stub.ListEntities, &memevov1.ListEntitiesRequest{
		Namespace: o.Namespace, Query: o.Query, Limit: o.Limit,
	})
}

// BeliefsOptions are the options of Beliefs.
type BeliefsOptions struct {
	// AsOf answers as of this world time: the values held then (a version superseded since counts, one
	// that became true later does not); zero: now, the current values.
	AsOf time.Time
}

// Beliefs returns what the agent believes about an entity now: one Belief per attribute with a current
// value, keyed or read from prose (ReadFromText), each with the memory holding it (ValidFrom, Source,
// Confidence), open doubts (PossiblyOutdatedBy), other current values and the fact key to pass to
// HistoryOfFact. An empty namespace means "default"; an unknown entity has no beliefs (not an error).
// With o.AsOf, the values held at that instant; the response's AsOf says which instant it answers for.
func (c *Client) Beliefs(ctx context.Context, namespace, entity string, o BeliefsOptions) (*memevov1.BeliefsResponse, error) {
	return unary(c, ctx, c.stub.Beliefs, &memevov1.BeliefsRequest{
		Namespace: namespace, Entity: entity, AsOf: timestamp(o.AsOf),
	})
}
