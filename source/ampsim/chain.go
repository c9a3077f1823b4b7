package ampsim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Block is one block of a simulated chain.
type Block struct {
	// Number is the block number.
	Number uint64
	// Hash is sha256(fork, network, number, parent).
	Hash reorg.Hash
	// Parent is the hash of the parent block (zero for genesis).
	Parent reorg.Hash
	// Timestamp is the block time.
	Timestamp time.Time
	// Fork is the fork seed: 0 for the original chain, incremented by every
	// reorg.
	Fork uint64
}

// Chain is the scripted chain of one network: a canonical chain plus every
// block ever created (forks included). It is safe for concurrent use.
type Chain struct {
	cfg NetworkConfig
	sy  *synth
	// replay, if set, serves the transactions and logs rows from templates
	// (Config.ReplayBlocks).
	replay *replay

	mu        sync.Mutex
	canonical []*Block // canonical[i] has number cfg.FirstBlock+i
	all       map[reorg.Hash]*Block
	forks     uint64
	changed   chan struct{} // closed and replaced on every change
}

func newChain(cfg NetworkConfig, sy *synth) *Chain {
	c := &Chain{cfg: cfg, sy: sy, all: map[reorg.Hash]*Block{}, changed: make(chan struct{})}
	c.mineLocked(cfg.InitialBlocks)
	return c
}

// Network returns the network id.
func (c *Chain) Network() string { return c.cfg.Network }

// Dataset returns the dataset name used in SQL.
func (c *Chain) Dataset() string { return c.cfg.Dataset }

// FirstBlock returns the number of the earliest synced block.
func (c *Chain) FirstBlock() uint64 { return c.cfg.FirstBlock }

func (c *Chain) blockHash(fork, number uint64, parent reorg.Hash) reorg.Hash {
	h := sha256.New()
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], fork)
	binary.BigEndian.PutUint64(buf[8:], number)
	h.Write(buf[:8])
	h.Write([]byte(c.cfg.Network))
	h.Write(buf[8:])
	h.Write(parent[:])
	var out reorg.Hash
	h.Sum(out[:0])
	return out
}

// parentOfFirst is the parent hash of the earliest synced block: zero at
// genesis, otherwise a deterministic hash standing for the unsynced history.
func (c *Chain) parentOfFirst() reorg.Hash {
	if c.cfg.FirstBlock == 0 {
		return reorg.Hash{}
	}
	return c.blockHash(0, c.cfg.FirstBlock-1, reorg.Hash{})
}

func (c *Chain) appendLocked(fork uint64) *Block {
	n := c.cfg.FirstBlock + uint64(len(c.canonical))
	parent := c.parentOfFirst()
	if len(c.canonical) > 0 {
		parent = c.canonical[len(c.canonical)-1].Hash
	}
	b := &Block{
		Number:    n,
		Parent:    parent,
		Hash:      c.blockHash(fork, n, parent),
		Timestamp: c.cfg.GenesisTime.Add(time.Duration(n-c.cfg.FirstBlock) * c.cfg.BlockTime),
		Fork:      fork,
	}
	c.canonical = append(c.canonical, b)
	c.all[b.Hash] = b
	return b
}

func (c *Chain) mineLocked(n int) {
	for range n {
		c.appendLocked(c.forks)
	}
}

func (c *Chain) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Mine appends n new blocks to the canonical chain and wakes every stream.
func (c *Chain) Mine(n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mineLocked(n)
	c.notifyLocked()
}

// Reorg replaces the last depth canonical blocks with a new branch of
// newBlocks blocks on a new fork (so Reorg(1, 2) at head 2 gives 0, 1, 2', 3:
// "reorg depth 1 + mine 1" in Amp's tests). The replaced blocks stay stored,
// so cursors on them are walked back (§2.5). newBlocks < depth shortens the
// chain. It returns an error when depth is < 1 or exceeds the chain.
func (c *Chain) Reorg(depth, newBlocks int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if depth < 1 || depth > len(c.canonical) {
		return fmt.Errorf("ampsim: reorg depth %d on network %q with %d blocks: want 1..%d: %w",
			depth, c.cfg.Network, len(c.canonical), len(c.canonical), ErrInvalidReorg)
	}
	if newBlocks < 0 {
		return fmt.Errorf("ampsim: reorg with %d new blocks: want >= 0: %w", newBlocks, ErrInvalidReorg)
	}
	c.canonical = c.canonical[:len(c.canonical)-depth]
	c.forks++
	for range newBlocks {
		c.appendLocked(c.forks)
	}
	c.notifyLocked()
	return nil
}

// Head returns the canonical head block number; ok is false while the chain
// has no synced block.
func (c *Chain) Head() (number uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.canonical) == 0 {
		return 0, false
	}
	return c.canonical[len(c.canonical)-1].Number, true
}

// Block returns canonical block n.
func (c *Chain) Block(n uint64) (Block, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.canonicalLocked(n)
	if b == nil {
		return Block{}, false
	}
	return *b, true
}

// BlockHash returns the hash of canonical block n.
func (c *Chain) BlockHash(n uint64) (reorg.Hash, bool) {
	b, ok := c.Block(n)
	return b.Hash, ok
}

// BlockByHash returns any stored block (canonical or on an abandoned fork).
func (c *Chain) BlockByHash(h reorg.Hash) (Block, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.all[h]
	if !ok {
		return Block{}, false
	}
	return *b, true
}

// Range returns the block range start..=end of the canonical chain as the
// server would send it, with prev_hash the parent of start.
func (c *Chain) Range(start, end uint64) (reorg.BlockRange, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, e := c.canonicalLocked(start), c.canonicalLocked(end)
	if s == nil || e == nil || start > end {
		return reorg.BlockRange{}, fmt.Errorf("ampsim: range %d..=%d is not on the canonical chain of %q", start, end, c.cfg.Network)
	}
	return c.rangeOf(s, e), nil
}

// Cursor returns the amp-resume cursor for canonical block n:
// {network: {number: n, hash: hash(n)}}.
func (c *Chain) Cursor(n uint64) (reorg.Cursor, error) {
	h, ok := c.BlockHash(n)
	if !ok {
		return nil, fmt.Errorf("ampsim: block %d is not on the canonical chain of %q", n, c.cfg.Network)
	}
	return reorg.Cursor{c.cfg.Network: {Number: n, Hash: h}}, nil
}

func (c *Chain) rangeOf(s, e *Block) reorg.BlockRange {
	return reorg.BlockRange{
		Network:     c.cfg.Network,
		Start:       s.Number,
		End:         e.Number,
		Hash:        e.Hash,
		PrevHash:    s.Parent,
		HasPrevHash: true,
		Timestamp:   uint64(e.Timestamp.Unix()),
	}
}

func (c *Chain) canonicalLocked(n uint64) *Block {
	if n < c.cfg.FirstBlock || n-c.cfg.FirstBlock >= uint64(len(c.canonical)) {
		return nil
	}
	return c.canonical[n-c.cfg.FirstBlock]
}

// blocks returns the canonical blocks start..=end (nil if any is missing).
func (c *Chain) blocks(start, end uint64) []*Block {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.canonicalLocked(start) == nil || c.canonicalLocked(end) == nil || start > end {
		return nil
	}
	i := start - c.cfg.FirstBlock
	return append([]*Block(nil), c.canonical[i:i+(end-start)+1]...)
}

// ExpectedRows returns the number of rows table ("blocks", "transactions"
// or "logs") has in canonical blocks start..=end, for test expectations.
func (c *Chain) ExpectedRows(table string, start, end uint64) (int, error) {
	t := tableDef(table)
	if t == nil {
		return 0, fmt.Errorf("ampsim: unknown table %q: want blocks, transactions or logs", table)
	}
	bs := c.blocks(start, end)
	if bs == nil {
		return 0, fmt.Errorf("ampsim: range %d..=%d is not on the canonical chain of %q", start, end, c.cfg.Network)
	}
	n := 0
	for _, b := range bs {
		n += c.rowCount(t, b)
	}
	return n, nil
}

// rowCount returns the rows of table t in block b.
func (c *Chain) rowCount(t *table, b *Block) int {
	if c.replay != nil && replayed(t) {
		return c.replay.count(t, b)
	}
	return t.rowCount(c.cfg, b)
}

// gen sends the rows of table t in block b to out.
func (c *Chain) gen(t *table, b *Block, out sink) {
	if c.replay != nil && replayed(t) {
		c.replay.gen(t, b, out)
		return
	}
	t.gen(c.sy, c.cfg, b, out)
}

// rows returns the rows of table t in block b.
func (c *Chain) rows(t *table, b *Block) []row {
	var rs rowSink
	c.gen(t, b, &rs)
	return rs.rows
}
