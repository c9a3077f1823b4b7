package encode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/sr"
)

// Registry registers a stream's schemas with a Confluent-compatible schema
// registry through franz-go's sr client, before anything is produced, and
// caches the ids. The registry decides whether a new version is compatible
// with the subject's (its compatibility level, BACKWARD by default on a
// Confluent registry): a refusal (409) is an *IncompatibleError with what
// the registry said. The bridge's own BACKWARD check (CheckBackward) only
// explains: it names the offending field in that error, and when the
// registry accepts a change it finds incompatible (a registry at NONE, or a
// stub such as srfake), it logs a warning naming the field and goes on. A
// Registry is safe for concurrent use.
//
// A stream whose SQL or result schema changed under its id registers with
// Evolve (PrepareRule) instead: there the stream's schema_evolution rule,
// checked by the bridge against every registered version, decides, and
// the registry's refusal is honoured too.
type Registry struct {
	cl    *sr.Client
	cfg   RegistryConfig
	log   *slog.Logger
	mu    sync.Mutex
	ids   map[string]int // subject + "\x00" + schema → id
	texts map[int]string // id → schema text
}

// RegistryOpt configures a Registry.
type RegistryOpt func(*Registry)

// WithRegistryLogger sets the logger of the compatibility warnings (default:
// discarded).
func WithRegistryLogger(l *slog.Logger) RegistryOpt { return func(r *Registry) { r.log = l } }

// WithRegistryConfig tells the Registry the configuration cl was built
// with, so that its errors name the keys to fix (registry.username,
// registry.tls.ca_file, …).
func WithRegistryConfig(c RegistryConfig) RegistryOpt { return func(r *Registry) { r.cfg = c } }

// NewRegistry returns a Registry using cl.
func NewRegistry(cl *sr.Client, opts ...RegistryOpt) *Registry {
	r := &Registry{cl: cl, log: slog.New(slog.DiscardHandler), ids: map[string]int{}, texts: map[int]string{}}
	for _, o := range opts {
		o(r)
	}
	return r
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

// sameCanonical reports whether a and b have the same Parsing Canonical
// Form: a registry may return a schema in a form of its own (Apicurio
// drops inherited namespaces and reorders attributes).
func sameCanonical(a, b string) bool {
	fa, err1 := Fingerprint(a)
	fb, err2 := Fingerprint(b)
	return err1 == nil && err2 == nil && fa == fb
}

// Ping lists the registry's subjects: the connection, TLS and credentials
// work. A refusal that a retry does not fix is a *RegistryAccessError.
func (r *Registry) Ping(ctx context.Context) error {
	if _, err := r.cl.Subjects(ctx); err != nil {
		return fmt.Errorf("listing the subjects of the registry at %s: %w", r.cfg.URL, classifyRegistryError(ctx, r.cfg, err))
	}
	return nil
}

// Register registers schema under subject and returns its id. When the
// registry refuses the schema as incompatible with the subject's versions,
// it fails with an *IncompatibleError naming the subject, what the registry
// said and, where the bridge's BACKWARD check finds it, the field; nothing
// is registered then. Refused credentials or TLS are *RegistryAccessErrors.
func (r *Registry) Register(ctx context.Context, subject, schema string) (int, error) {
	key := subject + "\x00" + schema
	r.mu.Lock()
	id, ok := r.ids[key]
	r.mu.Unlock()
	if ok {
		return id, nil
	}
	var diag *IncompatibleError // the bridge's own verdict, to explain the registry's
	latest, err := r.cl.SchemaByVersion(ctx, subject, -1)
	switch {
	case err == nil:
		if sameCanonical(schema, latest.Schema.Schema) {
			r.remember(key, latest.ID, schema)
			return latest.ID, nil
		}
		if err := CheckBackward(schema, latest.Schema.Schema); err != nil {
			if !errors.As(err, &diag) {
				return 0, fmt.Errorf("checking subject %q: %w", subject, err)
			}
			diag.Subject = subject
			diag.Reason += fmt.Sprintf(" (against version %d, id %d)", latest.Version, latest.ID)
		}
	case isNotFound(err):
	default:
		return 0, fmt.Errorf("reading the latest schema of subject %q: %w", subject, classifyRegistryError(ctx, r.cfg, err))
	}
	ss, err := r.cl.CreateSchema(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
			ie := &IncompatibleError{Subject: subject, Registry: registryMessage(re)}
			if diag != nil {
				ie.Field, ie.Reason = diag.Field, diag.Reason
			}
			return 0, ie
		}
		return 0, fmt.Errorf("registering subject %q: %w", subject, classifyRegistryError(ctx, r.cfg, err))
	}
	if diag != nil {
		r.log.WarnContext(ctx, "the registry accepted a schema that is not BACKWARD compatible with the subject's latest version "+
			"(its compatibility level allows it): consumers reading with the new schema cannot read the older records",
			"subject", subject, "field", diag.Field, "reason", diag.Reason, "id", ss.ID)
	}
	r.remember(key, ss.ID, schema)
	return ss.ID, nil
}

// registryMessage is what the registry said in a refusal: its message,
// else its body, with its error code.
func registryMessage(re *sr.ResponseError) string {
	msg := strings.TrimSpace(re.Message)
	if msg == "" {
		msg = strings.TrimSpace(string(re.Raw))
	}
	if re.ErrorCode != 0 {
		return fmt.Sprintf("%s (error code %d)", msg, re.ErrorCode)
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, re.StatusCode)
}

func (r *Registry) remember(key string, id int, schema string) {
	r.mu.Lock()
	r.ids[key] = id
	r.texts[id] = schema
	r.mu.Unlock()
}

// Prepare registers enc's value schema as <topic>-value (and, in row-key
// mode, its key schema as <topic>-key) and switches enc to the Confluent
// wire format with the ids. On error enc is left unchanged.
func (r *Registry) Prepare(ctx context.Context, topic string, enc *Encoder) error {
	return r.prepare(ctx, topic, enc, r.Register)
}

// prepare registers enc's value schema with registerValue and its key
// schema (row-key mode) with Register, then switches enc to the Confluent
// wire format with the ids; on error enc is left unchanged.
func (r *Registry) prepare(ctx context.Context, topic string, enc *Encoder, registerValue func(context.Context, string, string) (int, error)) error {
	s := enc.Schemas()
	vid, err := registerValue(ctx, ValueSubject(topic), s.Value)
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
		return "", fmt.Errorf("reading schema id %d: %w", id, classifyRegistryError(ctx, r.cfg, err))
	}
	s = sch.Schema
	r.mu.Lock()
	r.texts[id] = s
	r.mu.Unlock()
	return s, nil
}

// Evolve registers schema under subject as a stream's evolved schema and
// returns its id: the id of the version that has the same schema, or a new
// version. A new version must pass rule against every version registered
// under the subject, checked here, so a registry whose compatibility level
// is laxer (NONE, or a stub that always says yes) cannot let a change
// through that the stream's schema_evolution refuses; the registry's own
// refusal (409) is honoured as in Register. A failure is an
// *IncompatibleError naming the subject, the field, the rule and both
// schemas; nothing is registered then.
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
	case isNotFound(err):
	default:
		return 0, fmt.Errorf("reading the versions of subject %q: %w", subject, classifyRegistryError(ctx, r.cfg, err))
	}
	ss, err := r.cl.CreateSchema(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusConflict {
			ie := &IncompatibleError{Subject: subject, Registry: registryMessage(re),
				Rule: "the registry's compatibility level for the subject", New: schema}
			if n := len(versions); n > 0 {
				ie.Version, ie.ID, ie.Registered = versions[n-1].Version, versions[n-1].ID, versions[n-1].Schema.Schema
			}
			return 0, ie
		}
		return 0, fmt.Errorf("registering subject %q: %w", subject, classifyRegistryError(ctx, r.cfg, err))
	}
	r.remember(key, ss.ID, schema)
	return ss.ID, nil
}

// PrepareRule is Prepare for a stream whose SQL or result schema changed
// under its id: the value schema is registered with Evolve under rule (the
// key schema, in row-key mode, with Register).
func (r *Registry) PrepareRule(ctx context.Context, topic string, enc *Encoder, rule Rule) error {
	return r.prepare(ctx, topic, enc, func(ctx context.Context, subject, schema string) (int, error) {
		return r.Evolve(ctx, subject, schema, rule)
	})
}
