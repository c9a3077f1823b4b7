// Package liblog routes the process-global loggers of go-redis and gRPC
// through log/slog.
//
// Neither library takes a logger per client: go-redis writes unstructured
// lines ("redis: …" on stderr) through the logger redis.SetLogger sets,
// gRPC through the one grpclog.SetLoggerV2 sets, which must happen before
// any gRPC call. They are the one exception to the injected logger (style
// H11): main calls Install once, before any client exists, and each command
// points the adapters at its own logger with Use, so their lines come out
// in the configured format and level with a component attribute.
package liblog

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/grpclog"
)

// libraryLog is the logger the global adapters write to; nil discards.
type libraryLog struct{ l atomic.Pointer[slog.Logger] }

// logger returns the current logger (a discarding one before any is set).
func (ll *libraryLog) logger() *slog.Logger {
	if l := ll.l.Load(); l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// libraryLogs is what Install installs into go-redis and gRPC: the one
// package-level variable, as the libraries' loggers are process-global.
var libraryLogs libraryLog

// Install installs the adapters into go-redis and gRPC. Call it once, from
// main, before any client is created.
func Install() {
	redis.SetLogger(redisLogger{&libraryLogs})
	grpclog.SetLoggerV2(grpcLogger{&libraryLogs})
}

// Use points the installed adapters at l (a command's logger).
func Use(l *slog.Logger) { libraryLogs.l.Store(l) }

// redisLogger adapts go-redis's Printf logger. go-redis logs only trouble
// (at its default level, errors), without a level of its own: its lines
// are warnings here.
type redisLogger struct{ ll *libraryLog }

// Printf logs one go-redis line at Warn.
func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l := r.ll.logger()
	if !l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	l.WarnContext(ctx, fmt.Sprintf(format, v...), "component", "redis")
}

// grpcLogger adapts gRPC's LoggerV2. gRPC's Info lines (channel and
// connectivity changes, several per reconnect) are logged at Debug; its
// warnings and errors keep their level: reconnects themselves are logged by
// the source, per stream.
type grpcLogger struct{ ll *libraryLog }

var _ grpclog.LoggerV2 = grpcLogger{}

func (g grpcLogger) log(lvl slog.Level, msg func() string) {
	l := g.ll.logger()
	if !l.Enabled(context.Background(), lvl) {
		return
	}
	l.Log(context.Background(), lvl, msg(), "component", "grpc")
}

// Info logs at Debug.
func (g grpcLogger) Info(args ...any) {
	g.log(slog.LevelDebug, func() string { return fmt.Sprint(args...) })
}

// Infoln logs at Debug.
func (g grpcLogger) Infoln(args ...any) {
	g.log(slog.LevelDebug, func() string { return sprintln(args) })
}

// Infof logs at Debug.
func (g grpcLogger) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, func() string { return fmt.Sprintf(format, args...) })
}

// Warning logs at Warn.
func (g grpcLogger) Warning(args ...any) {
	g.log(slog.LevelWarn, func() string { return fmt.Sprint(args...) })
}

// Warningln logs at Warn.
func (g grpcLogger) Warningln(args ...any) {
	g.log(slog.LevelWarn, func() string { return sprintln(args) })
}

// Warningf logs at Warn.
func (g grpcLogger) Warningf(format string, args ...any) {
	g.log(slog.LevelWarn, func() string { return fmt.Sprintf(format, args...) })
}

// Error logs at Error.
func (g grpcLogger) Error(args ...any) {
	g.log(slog.LevelError, func() string { return fmt.Sprint(args...) })
}

// Errorln logs at Error.
func (g grpcLogger) Errorln(args ...any) {
	g.log(slog.LevelError, func() string { return sprintln(args) })
}

// Errorf logs at Error.
func (g grpcLogger) Errorf(format string, args ...any) {
	g.log(slog.LevelError, func() string { return fmt.Sprintf(format, args...) })
}

// Fatal logs at Error and exits, as LoggerV2 requires.
func (g grpcLogger) Fatal(args ...any) { g.Error(args...); os.Exit(1) }

// Fatalln logs at Error and exits.
func (g grpcLogger) Fatalln(args ...any) { g.Errorln(args...); os.Exit(1) }

// Fatalf logs at Error and exits.
func (g grpcLogger) Fatalf(format string, args ...any) { g.Errorf(format, args...); os.Exit(1) }

// V reports whether verbosity level v is logged: only level 0 (gRPC's
// default), and only when Debug is on.
func (g grpcLogger) V(v int) bool {
	return v <= 0 && g.ll.logger().Enabled(context.Background(), slog.LevelDebug)
}

// sprintln is fmt.Sprintln without the newline.
func sprintln(args []any) string {
	s := fmt.Sprintln(args...)
	return s[:len(s)-1]
}
