package ampsim

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/metadata"
)

// Defaults applied by [Config] when a field is left zero.
const (
	DefaultAddr                = "127.0.0.1:0"
	DefaultNetwork             = "mainnet"
	DefaultDataset             = "eth_rpc"
	DefaultNamespace           = "edgeandnode"
	DefaultBlockTime           = 12 * time.Second
	DefaultTxPerBlock          = 171
	DefaultLogsPerTx           = 2
	DefaultMaxMicrobatchBlocks = 1000
	DefaultKeepAliveInterval   = 30 * time.Second
	DefaultBatchRows           = 8192
	DefaultMaxFlightDataBytes  = 2 << 20
)

// KeepAlivePolicy says when the server sends 0-row keep-alive batches
// (amp-protocol.md §2.3).
type KeepAlivePolicy int

const (
	// KeepAlivePerMicrobatch is the real server's behaviour: one keep-alive
	// when a microbatch starts (tokio's first interval tick completes at
	// once and the query is not ready yet), then one every interval while
	// that microbatch executes (see [Config.MicrobatchDelay]). Nothing is
	// sent while idle between microbatches.
	KeepAlivePerMicrobatch KeepAlivePolicy = iota
	// KeepAlivePeriodicFromStart is what the Python SDK docs report: a 0-row
	// batch every interval counted from the start of the DoGet, idle or not.
	// It carries the current (or last) microbatch's range with
	// ranges_complete false; before the first microbatch nothing is sent.
	KeepAlivePeriodicFromStart
	// KeepAliveOff never sends keep-alives.
	KeepAliveOff
)

// String returns "per-microbatch", "periodic-from-start" or "off".
func (p KeepAlivePolicy) String() string {
	switch p {
	case KeepAlivePerMicrobatch:
		return "per-microbatch"
	case KeepAlivePeriodicFromStart:
		return "periodic-from-start"
	case KeepAliveOff:
		return "off"
	default:
		return fmt.Sprintf("KeepAlivePolicy(%d)", int(p))
	}
}

// ParseKeepAlivePolicy parses the String form of a policy.
func ParseKeepAlivePolicy(s string) (KeepAlivePolicy, error) {
	for _, p := range []KeepAlivePolicy{KeepAlivePerMicrobatch, KeepAlivePeriodicFromStart, KeepAliveOff} {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("ampsim: unknown keep-alive policy %q: want per-microbatch, periodic-from-start or off", s)
}

// NetworkConfig describes one network (one raw dataset) served by the
// simulator.
type NetworkConfig struct {
	// Network is the network id sent in ranges and expected in cursors.
	// Default "mainnet" for the primary network; required for extra ones.
	Network string
	// Dataset is the dataset name used in SQL (dataset.table). Default
	// "eth_rpc" for the primary network; required for extra ones.
	Dataset string
	// Namespace is accepted in "namespace/dataset".table. Default
	// "edgeandnode".
	Namespace string
	// FirstBlock is the number of the earliest synced block. Its parent hash
	// is zero only when FirstBlock is 0 (genesis).
	FirstBlock uint64
	// InitialBlocks is the number of blocks synced when the server is
	// created; 0 leaves the dataset empty until Mine (scenario A17).
	InitialBlocks int
	// BlockTime spaces block timestamps. Default 12 s.
	BlockTime time.Duration
	// GenesisTime is the timestamp of FirstBlock. Default
	// 2025-12-01T00:00:00Z.
	GenesisTime time.Time
	// TxPerBlock is the mean number of transactions per block (each block
	// has between TxPerBlock/2 and TxPerBlock/2+TxPerBlock, derived from its
	// hash). 0 means the default 171 (mainnet, late 2025); negative means no
	// transactions.
	TxPerBlock int
	// LogsPerTx is the mean number of logs per transaction (0..2*LogsPerTx,
	// derived from the tx hash). 0 means the default 2; negative means none.
	LogsPerTx int
}

// RequestInfo describes one GetFlightInfo or DoGet call as the server saw it.
type RequestInfo struct {
	// Method is "GetFlightInfo" or "DoGet".
	Method string
	// Header is the call's incoming gRPC metadata (amp-stream, amp-resume,
	// authorization, ...), keys lowercase.
	Header metadata.MD
	// SQL is the query: from the descriptor for GetFlightInfo, from the
	// ticket for DoGet.
	SQL string
	// Streaming is the streaming decision (GetFlightInfo) or the ticket's
	// flag (DoGet).
	Streaming bool
	// Cursor is the raw amp-resume value fixed in the ticket ("" if none or
	// ignored because it was not valid JSON).
	Cursor string
}

// Config configures a [Server]. The zero value is valid: an empty mainnet
// eth_rpc dataset on 127.0.0.1:0.
type Config struct {
	// Addr is the TCP listen address. Default "127.0.0.1:0".
	Addr string
	// NetworkConfig is the primary network; [Server.Mine] and friends act on
	// it.
	NetworkConfig
	// ExtraNetworks are further networks with their own datasets, for
	// multi-network batch queries (scenario A19).
	ExtraNetworks []NetworkConfig

	// MaxMicrobatchBlocks is server_microbatch_max_interval. Default 1000.
	MaxMicrobatchBlocks uint64
	// KeepAlive is the keep-alive policy. Default per-microbatch.
	KeepAlive KeepAlivePolicy
	// KeepAliveInterval is the keep-alive period. Default 30 s; the real
	// server never goes below 30 s, tests may use milliseconds.
	KeepAliveInterval time.Duration
	// MicrobatchDelay simulates the execution time of every streaming
	// microbatch: the server waits this long after the microbatch starts and
	// before its data, sending keep-alives per policy meanwhile (scenarios
	// A7, F5).
	MicrobatchDelay time.Duration

	// BlockInterval mines one block on the primary network every interval
	// while the server runs; 0 mines only on demand.
	BlockInterval time.Duration
	// ReorgEvery makes every N-th timer tick a reorg of ReorgDepth blocks
	// (replaced by ReorgDepth+1 new blocks) instead of a plain new block; 0
	// never reorgs.
	ReorgEvery int
	// ReorgDepth is the depth of timer reorgs. Default 1.
	ReorgDepth int

	// BatchRows caps the rows of one internal batch before the 2 MiB split
	// (DataFusion's batch size). Default 8192.
	BatchRows int
	// MaxFlightDataBytes is the target size of one FlightData message
	// (§2.4). Default 2 MiB.
	MaxFlightDataBytes int
	// UnsyncedTables lists tables ("blocks", "transactions", "logs", or
	// "dataset.table" for another network) that have no synced data: a batch
	// query on them reports ranges [] and a streaming query ends at once
	// with the empty stream (scenarios A3, A17).
	UnsyncedTables []string
	// HiddenColumns lists columns ("table.column" of the primary network's
	// dataset, or "dataset.table.column") left out of their table, as in an
	// older version of the dataset: SELECT * does not return them and a
	// query naming them fails. Server.SetHiddenColumns changes them while
	// the server runs, so a query's schema changes across reconnects and
	// bridge restarts (schema evolution tests).
	HiddenColumns []string
	// DictionaryStrings makes Utf8 output columns (transactions.value)
	// Dictionary<Int32, Utf8>, so clients can be tested on dictionary
	// batches.
	DictionaryStrings bool

	// ReplayBlocks, when > 0, turns on replay mode for throughput
	// benchmarks: the transactions and logs rows of ReplayBlocks template
	// blocks are generated once, and every block serves the rows of one
	// template (chosen by its number and fork) with its own _block_num,
	// block_num, block_hash and timestamp, and tx_hash = the template's
	// tx_hash XOR the block hash. Unfiltered single-table scans (without
	// DictionaryStrings or LIMIT) are then served as zero-copy slices of pre-built Arrow batches, so the simulator costs
	// little per row. Row counts and contents stay deterministic and agree
	// across streaming, batch and filtered queries and
	// [Chain.ExpectedRows]; the protocol is unchanged. Default 0: every
	// block's rows are generated from its hash as it is served.
	ReplayBlocks int

	// TLS, when set, makes the server speak TLS with this configuration
	// (its Certificates, and ClientCAs/ClientAuth for mutual TLS) instead
	// of plaintext h2c. Default nil: plaintext, like ampd.
	TLS *tls.Config
	// TLSCertFile and TLSKeyFile, when set, are a PEM certificate and key
	// the server presents over TLS; they are loaded by New and added to
	// TLS (a new one with TLS 1.2 or newer when TLS is nil).
	TLSCertFile, TLSKeyFile string
	// Token, when not empty, is the bearer token every GetFlightInfo and
	// DoGet must carry ("authorization: Bearer <Token>"), as a hosted Amp
	// gateway requires; a call without it or with another token fails with
	// UNAUTHENTICATED before it is recorded. Default empty: no token is
	// required and any authorization header is ignored, like ampd.
	Token string

	// Allocator allocates every Arrow buffer the server builds. Default
	// memory.NewGoAllocator(); tests pass a checked allocator.
	Allocator memory.Allocator
	// Logger receives debug logs. Default: discard.
	Logger *slog.Logger
	// OnRequest, if set, is called synchronously for every GetFlightInfo and
	// DoGet call before it is served. It must be safe for concurrent use.
	OnRequest func(RequestInfo)
}

func (n *NetworkConfig) applyDefaults(primary bool) {
	if primary {
		if n.Network == "" {
			n.Network = DefaultNetwork
		}
		if n.Dataset == "" {
			n.Dataset = DefaultDataset
		}
	}
	if n.Namespace == "" {
		n.Namespace = DefaultNamespace
	}
	if n.BlockTime == 0 {
		n.BlockTime = DefaultBlockTime
	}
	if n.GenesisTime.IsZero() {
		n.GenesisTime = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	}
	switch {
	case n.TxPerBlock == 0:
		n.TxPerBlock = DefaultTxPerBlock
	case n.TxPerBlock < 0:
		n.TxPerBlock = -1
	}
	switch {
	case n.LogsPerTx == 0:
		n.LogsPerTx = DefaultLogsPerTx
	case n.LogsPerTx < 0:
		n.LogsPerTx = -1
	}
}

func (n *NetworkConfig) validate() error {
	switch {
	case n.Network == "":
		return fmt.Errorf("ampsim: a network needs a Network id, e.g. \"base\"")
	case n.Dataset == "":
		return fmt.Errorf("ampsim: network %q needs a Dataset name, e.g. \"base_rpc\"", n.Network)
	case strings.ContainsAny(n.Dataset, ". \"/@"):
		return fmt.Errorf("ampsim: dataset name %q of network %q must not contain '.', ' ', '\"', '/' or '@'", n.Dataset, n.Network)
	case n.InitialBlocks < 0:
		return fmt.Errorf("ampsim: InitialBlocks of network %q is %d, want >= 0", n.Network, n.InitialBlocks)
	case n.BlockTime < time.Second:
		return fmt.Errorf("ampsim: BlockTime of network %q is %v, want >= 1s (timestamps are in seconds)", n.Network, n.BlockTime)
	}
	return nil
}

// withDefaults returns a copy of c with defaults applied, or an error naming
// the invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	c.applyDefaults(true)
	c.ExtraNetworks = slices.Clone(c.ExtraNetworks)
	for i := range c.ExtraNetworks {
		c.ExtraNetworks[i].applyDefaults(false)
	}
	if c.MaxMicrobatchBlocks == 0 {
		c.MaxMicrobatchBlocks = DefaultMaxMicrobatchBlocks
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if c.ReorgDepth == 0 {
		c.ReorgDepth = 1
	}
	if c.BatchRows == 0 {
		c.BatchRows = DefaultBatchRows
	}
	if c.MaxFlightDataBytes == 0 {
		c.MaxFlightDataBytes = DefaultMaxFlightDataBytes
	}
	if c.Allocator == nil {
		c.Allocator = memory.NewGoAllocator()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return c, fmt.Errorf("ampsim: TLSCertFile and TLSKeyFile must be set together")
	}
	if c.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return c, fmt.Errorf("ampsim: loading TLSCertFile/TLSKeyFile: %w", err)
		}
		if c.TLS == nil {
			c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		} else {
			c.TLS = c.TLS.Clone()
		}
		c.TLS.Certificates = append(c.TLS.Certificates, cert)
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Config) validate() error {
	seenNet := map[string]bool{}
	seenDS := map[string]bool{}
	for _, n := range append([]NetworkConfig{c.NetworkConfig}, c.ExtraNetworks...) {
		if err := n.validate(); err != nil {
			return err
		}
		if seenNet[n.Network] {
			return fmt.Errorf("ampsim: network %q is configured twice", n.Network)
		}
		if seenDS[n.Dataset] {
			return fmt.Errorf("ampsim: dataset %q is configured twice", n.Dataset)
		}
		seenNet[n.Network], seenDS[n.Dataset] = true, true
	}
	switch {
	case c.KeepAlive < KeepAlivePerMicrobatch || c.KeepAlive > KeepAliveOff:
		return fmt.Errorf("ampsim: unknown KeepAlive policy %d", int(c.KeepAlive))
	case c.KeepAliveInterval < 0:
		return fmt.Errorf("ampsim: KeepAliveInterval is %v, want > 0", c.KeepAliveInterval)
	case c.MicrobatchDelay < 0:
		return fmt.Errorf("ampsim: MicrobatchDelay is %v, want >= 0", c.MicrobatchDelay)
	case c.BlockInterval < 0:
		return fmt.Errorf("ampsim: BlockInterval is %v, want >= 0 (0 mines on demand)", c.BlockInterval)
	case c.ReorgEvery < 0:
		return fmt.Errorf("ampsim: ReorgEvery is %d, want >= 0 (0 never reorgs)", c.ReorgEvery)
	case c.ReorgDepth < 1:
		return fmt.Errorf("ampsim: ReorgDepth is %d, want >= 1", c.ReorgDepth)
	case c.BatchRows < 1:
		return fmt.Errorf("ampsim: BatchRows is %d, want >= 1", c.BatchRows)
	case c.MaxFlightDataBytes < 1:
		return fmt.Errorf("ampsim: MaxFlightDataBytes is %d, want >= 1", c.MaxFlightDataBytes)
	case c.ReplayBlocks < 0:
		return fmt.Errorf("ampsim: ReplayBlocks is %d, want >= 0 (0 generates every block)", c.ReplayBlocks)
	}
	for _, t := range c.UnsyncedTables {
		ds, table, ok := strings.Cut(t, ".")
		if !ok {
			ds, table = c.Dataset, t
		}
		if !seenDS[ds] || tableDef(table) == nil {
			return fmt.Errorf("ampsim: UnsyncedTables entry %q names no table; want blocks, transactions, logs or dataset.table", t)
		}
	}
	return nil
}
