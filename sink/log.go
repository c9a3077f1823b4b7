package sink

import (
	"context"
	"log/slog"
)

// LevelKafkaDebug is the slog level franz-go's debug lines are logged at:
// below slog.LevelDebug, since they are per request. The bridge's
// log.level goes down to debug only, so they show only through a handler
// the embedding program enables at this level.
const LevelKafkaDebug = slog.LevelDebug - 4

// kgoLevels is the slog.Handler franz-go logs through (via kslog). franz-go
// logs about five Info lines per transaction (beginning transaction,
// flushing, ending transaction…), which at the bridge's default level
// would be most of its output and grow with the commit rate: its Info is
// demoted to Debug and its Debug to LevelKafkaDebug. Warn and Error keep
// their level.
type kgoLevels struct{ h slog.Handler }

var _ slog.Handler = kgoLevels{}

// kgoLevel maps a level franz-go logs at (through kslog) to the bridge's.
func kgoLevel(l slog.Level) slog.Level {
	switch {
	case l >= slog.LevelWarn:
		return l
	case l >= slog.LevelInfo:
		return slog.LevelDebug
	default:
		return LevelKafkaDebug
	}
}

// Enabled reports whether the handler logs franz-go's level l.
func (k kgoLevels) Enabled(ctx context.Context, l slog.Level) bool {
	return k.h.Enabled(ctx, kgoLevel(l))
}

// Handle logs r at its mapped level.
func (k kgoLevels) Handle(ctx context.Context, r slog.Record) error {
	r.Level = kgoLevel(r.Level)
	return k.h.Handle(ctx, r)
}

// WithAttrs returns the handler with attrs added.
func (k kgoLevels) WithAttrs(attrs []slog.Attr) slog.Handler {
	return kgoLevels{k.h.WithAttrs(attrs)}
}

// WithGroup returns the handler with group opened.
func (k kgoLevels) WithGroup(name string) slog.Handler { return kgoLevels{k.h.WithGroup(name)} }

// kgoLogger returns the logger franz-go's kslog adapter writes to: l with
// franz-go's levels mapped (kgoLevels).
func kgoLogger(l *slog.Logger) *slog.Logger { return slog.New(kgoLevels{l.Handler()}) }
