package offsets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// BackfillPlan is a stream's backfill as its owner fixed it in cluster
// mode, where the backfill's workers run on any member: every worker
// publishes the partitions of the one plan the store holds, so that no two
// workers publish the same blocks, whatever head each member probed.
type BackfillPlan struct {
	// Stream is the stream id.
	Stream string `json:"stream"`
	// Network is the one network the backfill covers.
	Network string `json:"network"`
	// From and End bound the backfill: blocks [From, End); the live stream
	// starts at End.
	From uint64 `json:"from"`
	End  uint64 `json:"end"`
	// Parts are the partitions, [From, To) each; worker k publishes the
	// parts whose index is k modulo Workers.
	Parts []PlanPart `json:"parts"`
	// Workers is the number of workers the plan was made for.
	Workers int `json:"workers"`
	// CreatedAt is when the owner stored it (UTC).
	CreatedAt time.Time `json:"created_at"`
}

// PlanPart is one partition of a plan: blocks [From, To).
type PlanPart struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// Validate checks the plan and returns a *ValidationError naming every
// problem.
func (p BackfillPlan) Validate() error {
	var probs []string
	if err := ValidateStream(p.Stream); err != nil {
		probs = append(probs, fmt.Sprintf("stream id %q is not valid (want [a-z0-9_.-]+)", p.Stream))
	}
	if p.End < p.From {
		probs = append(probs, fmt.Sprintf("end %d is below from %d", p.End, p.From))
	}
	if p.Workers < 1 {
		probs = append(probs, fmt.Sprintf("workers %d: want at least 1", p.Workers))
	}
	next := p.From
	for _, pt := range p.Parts {
		if pt.From != next || pt.To <= pt.From {
			probs = append(probs, fmt.Sprintf("partition [%d, %d) does not follow block %d: the parts must tile [from, end)", pt.From, pt.To, next))
			break
		}
		next = pt.To
	}
	if len(probs) == 0 && next != p.End {
		probs = append(probs, fmt.Sprintf("the parts end at block %d, not at end %d", next, p.End))
	}
	if len(probs) == 0 {
		return nil
	}
	return &ValidationError{What: "backfill plan of stream " + p.Stream, Problems: probs}
}

// PlanStore holds the backfill plans of cluster mode.
type PlanStore interface {
	// ClaimPlan stores p unless the stream has a plan already, and returns
	// the plan stored (p, or the earlier one).
	ClaimPlan(ctx context.Context, p BackfillPlan) (BackfillPlan, error)
	// Plan returns the stream's plan, or ErrNotFound.
	Plan(ctx context.Context, stream string) (BackfillPlan, error)
	// DropPlan deletes the stream's plan (after the hand-over).
	DropPlan(ctx context.Context, stream string) error
}

var _ PlanStore = (*RedisStore)(nil)

// PlanKey is the Redis key of stream's backfill plan.
func (s *RedisStore) PlanKey(stream string) string {
	return s.prefix + "{" + stream + "}:backfill:plan"
}

// ClaimPlan stores p with SET NX and returns the plan stored.
func (s *RedisStore) ClaimPlan(ctx context.Context, p BackfillPlan) (BackfillPlan, error) {
	if err := p.Validate(); err != nil {
		return BackfillPlan{}, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return BackfillPlan{}, fmt.Errorf("offsets: encoding the backfill plan of stream %q: %w", p.Stream, err)
	}
	key := s.PlanKey(p.Stream)
	ok, err := await(ctx, func() (bool, error) { return s.client.SetNX(ctx, key, b, 0).Result() })
	if err != nil {
		return BackfillPlan{}, fmt.Errorf("offsets: storing the backfill plan at redis key %s: %w", key, s.classify(err))
	}
	if ok {
		return p, nil
	}
	return s.Plan(ctx, p.Stream)
}

// Plan returns the stream's plan, or ErrNotFound.
func (s *RedisStore) Plan(ctx context.Context, stream string) (BackfillPlan, error) {
	if err := ValidateStream(stream); err != nil {
		return BackfillPlan{}, err
	}
	key := s.PlanKey(stream)
	b, err := await(ctx, func() ([]byte, error) { return s.client.Get(ctx, key).Bytes() })
	if errors.Is(err, redis.Nil) {
		return BackfillPlan{}, fmt.Errorf("%w: redis key %s does not exist", ErrNotFound, key)
	}
	if err != nil {
		return BackfillPlan{}, fmt.Errorf("offsets: loading the backfill plan from redis key %s: %w", key, s.classify(err))
	}
	var p BackfillPlan
	if err := json.Unmarshal(b, &p); err != nil {
		return BackfillPlan{}, &ValidationError{What: "redis key " + key, Problems: []string{"not a backfill plan: " + err.Error()}}
	}
	if err := p.Validate(); err != nil {
		return BackfillPlan{}, err
	}
	if p.Stream != stream {
		return BackfillPlan{}, &ValidationError{What: "redis key " + key, Problems: []string{fmt.Sprintf("it holds the plan of stream %q", p.Stream)}}
	}
	return p, nil
}

// DropPlan deletes the stream's plan.
func (s *RedisStore) DropPlan(ctx context.Context, stream string) error {
	key := s.PlanKey(stream)
	if _, err := await(ctx, func() (int64, error) { return s.client.Del(ctx, key).Result() }); err != nil {
		return fmt.Errorf("offsets: deleting the backfill plan at redis key %s: %w", key, s.classify(err))
	}
	return nil
}
