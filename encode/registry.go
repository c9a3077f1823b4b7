package encode

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// Registry registers a stream's schemas with a Confluent-compatible schema
// registry through franz-go's sr client, before anything is produced, and
// caches the ids. Every new version is checked against every version
// registered under its subject with a Rule (BACKWARD unless the caller asks
// FULL), twice: locally with Rule.Check (so an incompatible change is caught
// on every registry, including stubs whose compatibility endpoint always
// answers yes) and by the registry itself, whose refusal is honoured. A
// Registry is safe for concurrent use.
type Registry struct {
	cl    *sr.Client
	mu    sync.Mutex
	ids   map[string]int // subject + "\x00" + schema → id
	texts map[int]string // id → schema text
}

// NewRegistry returns a Registry using cl.
func NewRegistry(cl *sr.Client) *Registry {
	return &Registry{cl: cl, ids: map[string]int{}, texts: map[int]string{}}
}

// ValueSubject is the TopicNameStrategy subject of a topic's values.
func ValueSubject(topic string) string { return topic + "-value" }

// KeySubject is the TopicNameStrategy subject of a topic's keys.
func KeySubject(topic string) string { return topic + "-key" }

func isNotFound(err error) bool {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode == sr.ErrSubjectNotFound.Code || re.ErrorCode == sr.ErrVersionNotFound.Code ||
			re.StatusCode == 404
	}
	return false
}

func sameCanonical(a, b string) bool {
	ca, err1 := goavro.NewCodec(a)
	cb, err2 := goavro.NewCodec(b)
	return err1 == nil && err2 == nil && ca.CanonicalSchema() == cb.CanonicalSchema()
}

// Register registers schema under subject with RuleBackward (Evolve).
func (r *Registry) Register(ctx context.Context, subject, schema string) (int, error) {
	return r.Evolve(ctx, subject, schema, RuleBackward)
}

// Evolve registers schema under subject and returns its id: the id of the
// version that has the same schema, or a new version. A new version must
// pass rule against every version registered under the subject, checked
// here (so stubs whose compatibility endpoint always answers yes cannot
// let an incompatible change through) and then by the registry, whose
// refusal is honoured. A failure is an *IncompatibleError naming the
// subject, the field, the rule and both schemas; nothing is registered then.
func (r *Registry) Evolve(ctx context.Context, subject, schema string, rule Rule) (int, error) {
	key := subject + "\x00" + schema
	r.mu.Lock()
	id, ok := r.ids[key]
	r.mu.Unlock()
	if ok {
		return id, nil
	}
	versions, err := r.cl.Schemas(ctx, subject)
	switch {
	case err == nil:
		for _, v := range versions {
			if sameCanonical(schema, v.Schema.Schema) {
				r.remember(key, v.ID, schema)
				return v.ID, nil
			}
		}
		for _, v := range versions {
			if err := rule.Check(schema, v.Schema.Schema); err != nil {
				var ie *IncompatibleError
				if errors.As(err, &ie) {
					ie.Subject, ie.Version, ie.ID, ie.Registered, ie.New = subject, v.Version, v.ID, v.Schema.Schema, schema
					return 0, ie
				}
				return 0, fmt.Errorf("checking subject %q against version %d: %w", subject, v.Version, err)
			}
		}
		if len(versions) > 0 {
			res, err := r.cl.CheckCompatibility(ctx, subject, -1, sr.Schema{Schema: schema, Type: sr.TypeAvro})
			if err != nil && !isNotFound(err) {
				return 0, fmt.Errorf("checking compatibility of subject %q with the registry: %w", subject, err)
			}
			if err == nil && !res.Is {
				latest := versions[len(versions)-1]
				return 0, &IncompatibleError{Subject: subject, Reason: "the registry says: " + strings.Join(res.Messages, "; "),
					Rule: "the registry's compatibility level for the subject", Version: latest.Version, ID: latest.ID,
					Registered: latest.Schema.Schema, New: schema}
			}
		}
	case isNotFound(err):
	default:
		return 0, fmt.Errorf("reading the versions of subject %q: %w", subject, err)
	}
	ss, err := r.cl.CreateSchema(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode == 409 {
			return 0, &IncompatibleError{Subject: subject, Reason: "the registry refused it: " + re.Error(),
				Rule: "the registry's compatibility level for the subject", New: schema}
		}
		return 0, fmt.Errorf("registering subject %q: %w", subject, err)
	}
	r.remember(key, ss.ID, schema)
	return ss.ID, nil
}

func (r *Registry) remember(key string, id int, schema string) {
	r.mu.Lock()
	r.ids[key] = id
	r.texts[id] = schema
	r.mu.Unlock()
}

// Prepare is PrepareRule with RuleBackward.
func (r *Registry) Prepare(ctx context.Context, topic string, enc *Encoder) error {
	return r.PrepareRule(ctx, topic, enc, RuleBackward)
}

// PrepareRule registers enc's value schema as <topic>-value under rule (and,
// in row-key mode, its key schema as <topic>-key, BACKWARD) and switches enc
// to the Confluent wire format with the ids. On error enc is left unchanged.
func (r *Registry) PrepareRule(ctx context.Context, topic string, enc *Encoder, rule Rule) error {
	s := enc.Schemas()
	vid, err := r.Evolve(ctx, ValueSubject(topic), s.Value, rule)
	if err != nil {
		return fmt.Errorf("preparing topic %q: %w", topic, err)
	}
	var kf Framing
	if s.Key != "" {
		kid, err := r.Register(ctx, KeySubject(topic), s.Key)
		if err != nil {
			return fmt.Errorf("preparing topic %q: %w", topic, err)
		}
		kf = ConfluentFraming(kid)
	}
	enc.SetFraming(ConfluentFraming(vid), kf)
	return nil
}

// SchemaText returns the schema registered under id (cached), e.g. for
// Retractor.Add when a record read back was written with an older version.
func (r *Registry) SchemaText(ctx context.Context, id int) (string, error) {
	r.mu.Lock()
	s, ok := r.texts[id]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	sch, err := r.cl.SchemaByID(ctx, id)
	if err != nil {
		return "", fmt.Errorf("reading schema id %d: %w", id, err)
	}
	s = sch.Schema
	r.mu.Lock()
	r.texts[id] = s
	r.mu.Unlock()
	return s, nil
}
