package encode

import (
	"strconv"
	"strings"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Names of the headers every data record carries (design.md §4).
const (
	HeaderBatchID = "amp-batch-id"
	HeaderOp      = "amp-op"
	HeaderNetwork = "amp-network"
	HeaderRange   = "amp-range"
	HeaderStream  = "amp-stream"
)

// Headers returns the headers of every record of a batch encoded with meta:
// amp-batch-id, amp-op, amp-network, amp-range ("start-end") and amp-stream.
// Ranges on several networks are joined with "|" in range order. They are the
// same for all rows of the batch, so the caller builds them once per batch
// and shares the slice (it must not modify it).
func (e *Encoder) Headers(meta BatchMeta) []Header {
	id := meta.BatchID
	if id == "" {
		id = reorg.BatchID(meta.Ranges)
	}
	network, _, _ := joinRanges(meta.Ranges)
	var rng strings.Builder
	for i, r := range meta.Ranges {
		if i > 0 {
			rng.WriteByte('|')
		}
		rng.WriteString(strconv.FormatUint(r.Start, 10))
		rng.WriteByte('-')
		rng.WriteString(strconv.FormatUint(r.End, 10))
	}
	return []Header{
		{Key: HeaderBatchID, Value: []byte(id)},
		{Key: HeaderOp, Value: []byte{byte(meta.Op)}},
		{Key: HeaderNetwork, Value: []byte(network)},
		{Key: HeaderRange, Value: []byte(rng.String())},
		{Key: HeaderStream, Value: []byte(e.cfg.Stream)},
	}
}
