package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const usage = `usage: devstack <command> [flags]

commands:
  kafka-ready -brokers HOST:PORT[,...] [-timeout 90s] [-sasl-user U -sasl-password-file F]
  kafka-acls  -brokers HOST:PORT -principal User:P[,...] -topic-prefix P -txn-prefix P [-sasl-user U -sasl-password-file F]
  pki         -dir DIR
  registry    -addr 127.0.0.1:PORT [-addr-file FILE]
  registry-ready -url http://HOST:PORT
  kfake       [-port 0] [-addr-file FILE] [-blackhole]
  freeport    [-n 1]
`

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, logger, os.Stdout, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("unknown or missing command (see usage above)")

func run(ctx context.Context, logger *slog.Logger, out io.Writer, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	switch cmd {
	case "kafka-ready":
		brokers := fs.String("brokers", "", "comma-separated seed brokers (required)")
		timeout := fs.Duration("timeout", 90*time.Second, "how long to wait for the broker")
		var admin adminAuth
		fs.StringVar(&admin.user, "sasl-user", "", "SASL PLAIN user (plaintext listener)")
		fs.StringVar(&admin.passwordFile, "sasl-password-file", "", "file holding the SASL user's password")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		if *brokers == "" {
			return errors.New("kafka-ready needs -brokers HOST:PORT")
		}
		opts, err := admin.opts()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return kafkaReady(ctx, logger, out, *brokers, opts...)
	case "kafka-acls":
		brokers := fs.String("brokers", "", "comma-separated seed brokers (required)")
		principals := fs.String("principal", "", "comma-separated principals to grant the bridge's ACLs to, e.g. User:bridge")
		var g aclGrant
		fs.StringVar(&g.topicPrefix, "topic-prefix", "", "the topics' name prefix")
		fs.StringVar(&g.txnPrefix, "txn-prefix", "", "the transactional ids' prefix")
		var admin adminAuth
		fs.StringVar(&admin.user, "sasl-user", "", "SASL PLAIN super user (plaintext listener)")
		fs.StringVar(&admin.passwordFile, "sasl-password-file", "", "file holding the super user's password")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		if *brokers == "" {
			return errors.New("kafka-acls needs -brokers HOST:PORT")
		}
		if *principals != "" {
			g.principals = strings.Split(*principals, ",")
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return grantACLs(ctx, out, *brokers, admin, g)
	case "pki":
		dir := fs.String("dir", "", "directory to write the PEM files into (required)")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		if *dir == "" {
			return errors.New("pki needs -dir DIR")
		}
		return writePKI(out, *dir)
	case "registry":
		addr := fs.String("addr", "127.0.0.1:0", "address to listen on")
		addrFile := fs.String("addr-file", "", "write the bound address to this file once listening")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		return serveRegistry(ctx, logger, *addr, *addrFile)
	case "registry-ready":
		url := fs.String("url", "", "base URL of the registry (required)")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		if *url == "" {
			return errors.New("registry-ready needs -url http://HOST:PORT")
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return registryReady(ctx, *url)
	case "kfake":
		var o kfakeOptions
		fs.IntVar(&o.Port, "port", 0, "port on 127.0.0.1 (0 picks a free one)")
		fs.StringVar(&o.AddrFile, "addr-file", "", "write the bound address to this file once listening")
		fs.BoolVar(&o.Blackhole, "blackhole", false, "accept produce requests without storing records (offsets still advance)")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		return serveKfake(ctx, logger, o)
	case "freeport":
		n := fs.Int("n", 1, "how many ports")
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("parsing flags: %w", err)
		}
		return freePorts(ctx, out, *n)
	default:
		fmt.Fprint(os.Stderr, usage)
		return fmt.Errorf("%q: %w", cmd, errUsage)
	}
}

func serveRegistry(ctx context.Context, logger *slog.Logger, addr, addrFile string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	reg := srfake.NewRegistry()
	srv := &http.Server{Handler: reg.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			ln.Close()
			return fmt.Errorf("writing address file: %w", err)
		}
	}
	logger.Info("serving srfake schema registry", "url", "http://"+ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving registry: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutting down registry: %w", err)
	}
	logger.Info("registry stopped")
	return nil
}

// registryReady does one GET /subjects and expects 200.
func registryReady(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/subjects", nil)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("requesting subjects: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /subjects: status %s", resp.Status)
	}
	return nil
}

func freePorts(ctx context.Context, out io.Writer, n int) error {
	if n < 1 || n > 100 {
		return fmt.Errorf("-n %d: want 1..100", n)
	}
	// Hold all listeners until every port is chosen, so the n are distinct.
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("listening on a free port: %w", err)
		}
		lns = append(lns, l)
		_, port, err := net.SplitHostPort(l.Addr().String())
		if err != nil {
			return fmt.Errorf("splitting address: %w", err)
		}
		if _, err := strconv.Atoi(port); err != nil {
			return fmt.Errorf("parsing port %q: %w", port, err)
		}
		fmt.Fprintln(out, port)
	}
	return nil
}
