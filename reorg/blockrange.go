package reorg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// Hash is a 32-byte block hash. Its text form is "0x" followed by 64
// lowercase hex digits, the form the Amp server emits.
type Hash [32]byte

// IsZero reports whether h is the all-zero hash (the parent of genesis).
func (h Hash) IsZero() bool { return h == Hash{} }

// String returns "0x" followed by 64 lowercase hex digits.
func (h Hash) String() string {
	var buf [66]byte
	buf[0], buf[1] = '0', 'x'
	hex.Encode(buf[2:], h[:])
	return string(buf[:])
}

// ParseHash parses "0x" followed by exactly 64 hex digits (either case).
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 66 || (s[:2] != "0x" && s[:2] != "0X") {
		return h, fmt.Errorf("reorg: parsing hash %q: want 0x followed by 64 hex digits", s)
	}
	if _, err := hex.Decode(h[:], []byte(s[2:])); err != nil {
		return h, fmt.Errorf("reorg: parsing hash %q: %w", s, err)
	}
	return h, nil
}

// MarshalText implements encoding.TextMarshaler.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// BlockRange is one network's inclusive block range as Amp sends it in a
// batch's app_metadata: blocks Start..=End, Hash of block End, PrevHash of the
// parent of block Start.
//
// The reorg rule compares ranges with [BlockRange.Same]: every field except
// Timestamp, as the Rust client does (its BlockRange has no timestamp).
type BlockRange struct {
	// Network is the network id, e.g. "mainnet".
	Network string
	// Start is the first block of the range (inclusive).
	Start uint64
	// End is the last block of the range (inclusive).
	End uint64
	// Hash is the hash of block End.
	Hash Hash
	// PrevHash is the hash of the parent of block Start. It is meaningful
	// only when HasPrevHash is true.
	PrevHash Hash
	// HasPrevHash is false when the server sent prev_hash as null or
	// omitted it (allowed only at genesis).
	HasPrevHash bool
	// Timestamp is the Unix time in seconds of block End, 0 when the server
	// did not send one.
	Timestamp uint64
}

// String formats the range for errors and logs: "mainnet 100..=102 (0x…)".
func (r BlockRange) String() string {
	return fmt.Sprintf("%s %d..=%d (%s)", r.Network, r.Start, r.End, r.Hash)
}

// Same reports whether r and o are the same range: equal in every field but
// Timestamp.
func (r BlockRange) Same(o BlockRange) bool {
	return r.Network == o.Network && r.Start == o.Start && r.End == o.End && r.Hash == o.Hash &&
		r.HasPrevHash == o.HasPrevHash && (!r.HasPrevHash || r.PrevHash == o.PrevHash)
}

// Blocks returns the number of blocks in the range.
func (r BlockRange) Blocks() uint64 { return r.End - r.Start + 1 }

// prevHashText is the prev_hash as received: "" when absent.
func (r BlockRange) prevHashText() string {
	if !r.HasPrevHash {
		return ""
	}
	return r.PrevHash.String()
}

// blockRangeJSON is the wire form of a BlockRange (amp-protocol.md §2.1).
type blockRangeJSON struct {
	Numbers   *numbersJSON `json:"numbers"`
	Network   string       `json:"network"`
	Hash      *Hash        `json:"hash"`
	PrevHash  *Hash        `json:"prev_hash"`
	Timestamp *uint64      `json:"timestamp,omitempty"`
}

type numbersJSON struct {
	Start *uint64 `json:"start"`
	End   *uint64 `json:"end"`
}

// MarshalJSON writes the Amp wire form:
// {"numbers":{"start":S,"end":E},"network":N,"hash":H,"prev_hash":P[,"timestamp":T]}.
func (r BlockRange) MarshalJSON() ([]byte, error) {
	start, end := r.Start, r.End
	h := r.Hash
	out := blockRangeJSON{Numbers: &numbersJSON{Start: &start, End: &end}, Network: r.Network, Hash: &h}
	if r.HasPrevHash {
		p := r.PrevHash
		out.PrevHash = &p
	}
	if r.Timestamp != 0 {
		ts := r.Timestamp
		out.Timestamp = &ts
	}
	return json.Marshal(out)
}

// UnmarshalJSON parses the Amp wire form strictly: numbers.start,
// numbers.end, network and hash are required; prev_hash may be null or
// absent; timestamp is optional; unknown keys are ignored.
func (r *BlockRange) UnmarshalJSON(b []byte) error {
	var in blockRangeJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return fmt.Errorf("reorg: parsing block range: %w", err)
	}
	switch {
	case in.Numbers == nil || in.Numbers.Start == nil || in.Numbers.End == nil:
		return fmt.Errorf("reorg: parsing block range: missing numbers.start or numbers.end")
	case in.Network == "":
		return fmt.Errorf("reorg: parsing block range: missing or empty network")
	case in.Hash == nil:
		return fmt.Errorf("reorg: parsing block range of network %q: missing hash", in.Network)
	case *in.Numbers.Start > *in.Numbers.End:
		return fmt.Errorf("reorg: parsing block range of network %q: start %d is after end %d",
			in.Network, *in.Numbers.Start, *in.Numbers.End)
	}
	*r = BlockRange{Network: in.Network, Start: *in.Numbers.Start, End: *in.Numbers.End, Hash: *in.Hash}
	if in.PrevHash != nil {
		r.PrevHash, r.HasPrevHash = *in.PrevHash, true
	}
	if in.Timestamp != nil {
		r.Timestamp = *in.Timestamp
	}
	return nil
}

// BatchID returns the deterministic id of a microbatch, computed as the Amp
// Python SDK computes _amp_batch_id: per range the first 16 hex digits of
// sha256("{network}:{start}:{end}:{hash}:{prev_hash}") with hashes as 0x…
// lowercase and an absent prev_hash as "", joined with "|" when the batch
// spans several networks (in the order given).
func BatchID(ranges []BlockRange) string {
	var sb strings.Builder
	for i, r := range ranges {
		if i > 0 {
			sb.WriteByte('|')
		}
		sb.WriteString(RangeID(r.Network, r.Start, r.End, r.Hash.String(), r.prevHashText()))
	}
	return sb.String()
}

// RangeID is the id of one range given its hashes as text; BatchID calls it
// for every range. With endHash == "" it computes the Python SDK's
// position-based id used when no hash is known: endHash becomes the full hex
// sha256 of "{network}:{start}:{end}" and prevHash is "".
func RangeID(network string, start, end uint64, endHash, prevHash string) string {
	if endHash == "" {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s:%d:%d", network, start, end))
		endHash, prevHash = hex.EncodeToString(sum[:]), ""
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s:%d:%d:%s:%s", network, start, end, endHash, prevHash))
	return hex.EncodeToString(sum[:8])
}
