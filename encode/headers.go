package encode

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Names of the Kafka record headers every data record carries (design.md
// §4): live and backfill inserts, retractions and, in key: row mode,
// tombstones. This is the one definition of the names; the values are text.
// (package sink, which imports no other stage, spells "amp-op" once more as
// sink.HeaderOp to count records by it.)
const (
	// HeaderBatchID holds the batch id of the record's microbatch
	// (design.md §3), the value the envelope's source.batch_id holds:
	// consumers de-duplicate a replayed batch and find a retracted one by it.
	HeaderBatchID = "amp-batch-id"
	// HeaderOp holds the record's operation, as the envelope's op does: "c"
	// live insert, "r" backfill insert, "d" retraction (and its tombstone).
	HeaderOp = "amp-op"
	// HeaderNetwork holds the network of each of the batch's block ranges,
	// in range order, joined with "|" (see [FormatRangeHeaders]).
	HeaderNetwork = "amp-network"
	// HeaderRange holds each of the batch's block ranges as "start-end"
	// (inclusive block numbers, decimal), in the order of amp-network,
	// joined with "|". Hashes are not in headers; they are in the envelope.
	HeaderRange = "amp-range"
	// HeaderStream holds the id of the stream that wrote the record.
	HeaderStream = "amp-stream"
)

// FormatRangeHeaders returns the values of the amp-network and amp-range
// headers of a batch of ranges: the networks joined with "|" and the
// "start-end" spans joined with "|", in range order ("mainnet|base",
// "10-12|7-7"). No ranges give two empty strings. A network id containing
// "|" would not parse back (Amp's network ids are names such as "mainnet").
func FormatRangeHeaders(ranges []reorg.BlockRange) (network, span string) {
	if len(ranges) == 1 {
		r := ranges[0]
		return r.Network, strconv.FormatUint(r.Start, 10) + "-" + strconv.FormatUint(r.End, 10)
	}
	var nb strings.Builder
	var sb []byte
	for i, r := range ranges {
		if i > 0 {
			nb.WriteByte('|')
			sb = append(sb, '|')
		}
		nb.WriteString(r.Network)
		sb = strconv.AppendUint(sb, r.Start, 10)
		sb = append(sb, '-')
		sb = strconv.AppendUint(sb, r.End, 10)
	}
	return nb.String(), string(sb)
}

// ErrRangeHeader is wrapped by ParseRangeHeaders' errors.
var ErrRangeHeader = errors.New("malformed amp-network/amp-range headers")

// ParseRangeHeaders reads the values of the amp-network and amp-range
// headers back into ranges: Network, Start and End set, hashes and
// timestamps zero (headers carry none). It is the inverse of
// FormatRangeHeaders; two empty values give no ranges. It returns an error
// wrapping ErrRangeHeader when the two headers list different numbers of
// ranges, a network is empty, or a span is not "start-end" with decimal
// block numbers and start <= end.
func ParseRangeHeaders(network, span string) ([]reorg.BlockRange, error) {
	if network == "" && span == "" {
		return nil, nil
	}
	nets := strings.Split(network, "|")
	spans := strings.Split(span, "|")
	if len(nets) != len(spans) {
		return nil, fmt.Errorf("%w: %d networks (%q) but %d ranges (%q)", ErrRangeHeader, len(nets), network, len(spans), span)
	}
	out := make([]reorg.BlockRange, len(nets))
	for i, n := range nets {
		if n == "" {
			return nil, fmt.Errorf("%w: range %d of %q has no network", ErrRangeHeader, i, network)
		}
		s, e, ok := strings.Cut(spans[i], "-")
		if !ok {
			return nil, fmt.Errorf("%w: range %q is not start-end", ErrRangeHeader, spans[i])
		}
		start, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: range %q: start: %w", ErrRangeHeader, spans[i], err)
		}
		end, err := strconv.ParseUint(e, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: range %q: end: %w", ErrRangeHeader, spans[i], err)
		}
		if start > end {
			return nil, fmt.Errorf("%w: range %q ends before it starts", ErrRangeHeader, spans[i])
		}
		out[i] = reorg.BlockRange{Network: n, Start: start, End: end}
	}
	return out, nil
}
