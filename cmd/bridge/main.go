// Command bridge publishes Amp query streams to Kafka exactly once and
// retracts what chain reorganisations replace.
//
// Subcommands: run, validate, version (see usage). main stays thin: it parses
// the subcommand, builds a context cancelled on SIGINT/SIGTERM and exits with
// the status the subcommand returns.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/liblog"
)

// version is set with -ldflags "-X main.version=…"; otherwise it comes from
// the module build info.
var version = ""

const usage = `bridge publishes Amp query streams to Kafka exactly once.

Usage:
  bridge demo                      run everything embedded (simulated Amp chain with
                                   reorgs, in-process Kafka, Redis and registry),
                                   print what is published and retracted, then verify
  bridge run -c bridge.yaml        publish every configured stream
  bridge verify -c bridge.yaml [-stream S]
                                   compare a stream's topic with a fresh query at Amp
  bridge status -c bridge.yaml     each stream: cursor, head lag, last commit, retained batches,
                                   backfill progress

status, verify, schema and rewind take -timeout D (default 30s): a service
that has not answered by then ends the command with an error naming it.
  bridge schema -c bridge.yaml [-stream S]
                                   print the Avro schemas a stream registers
  bridge rewind -c bridge.yaml -stream S -to-block N
                                   retract what stream S published from block N on and
                                   make it resume there (stop the running bridge first)
  bridge validate -c bridge.yaml   check a configuration without connecting
  bridge version                   print the version

Configuration: one YAML file; every key can be overridden by BRIDGE_<PATH>
environment variables (BRIDGE_KAFKA_BROKERS, BRIDGE_STREAMS_0_SQL, ...) and
by -set path=value flags (-set kafka.brokers=a:9092 -set streams.0.sql=...).
Secrets come only from the environment or files: BRIDGE_AMP_TOKEN,
BRIDGE_KAFKA_SASL_PASSWORD, BRIDGE_REGISTRY_PASSWORD,
BRIDGE_CHECKPOINT_REDIS_PASSWORD.
`

func main() {
	// go-redis's and gRPC's loggers are process-global and gRPC's must be
	// set before any gRPC call: installed here, once (liblog.go).
	liblog.Install()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a command line that could not be understood.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "amp-kafka-bridge %s\n", buildVersion())
	case "validate":
		err = cmdValidate(ctx, args[1:], stdout)
	case "run":
		err = cmdRun(ctx, args[1:], stderr)
	case "demo":
		err = cmdDemo(ctx, args[1:], stdout, stderr)
	case "verify":
		err = cmdVerify(ctx, args[1:], stdout, stderr)
	case "rewind":
		err = cmdRewind(ctx, args[1:], stdout, stderr)
	case "status":
		err = cmdStatus(ctx, args[1:], stdout, stderr)
	case "schema":
		err = cmdSchema(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "bridge: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "bridge: %v\n", err)
		return 1
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func cmdValidate(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	path := fs.String("c", "bridge.yaml", "configuration file")
	sets := config.SetFlags{}
	fs.Var(sets, "set", "override a configuration key: -set path=value (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.LoadConfig(*path, sets.Lookup(os.LookupEnv))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: valid, %d stream(s)\n", *path, len(cfg.Streams))
	return nil
}
