package source

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// AppMetadata is the JSON app_metadata Amp attaches to every record batch
// (amp-protocol.md §2.1): the block ranges the batch belongs to and whether
// the batch completes them (the microbatch's watermark).
type AppMetadata struct {
	// Ranges are the block ranges of the batch, one per network. A streaming
	// query always has exactly one; a batch query one per network; nil when
	// the server sent an empty list or no metadata at all.
	Ranges []reorg.BlockRange
	// Complete is the ranges_complete flag: true only on the 0-row batch that
	// ends a microbatch.
	Complete bool
}

// MarshalJSON writes Amp's compact wire form
// {"ranges":[...],"ranges_complete":false}; nil Ranges is written as [].
func (m AppMetadata) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"ranges":[`)
	for i, r := range m.Ranges {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("encoding ranges[%d]: %w", i, err)
		}
		buf.Write(b)
	}
	if m.Complete {
		buf.WriteString(`],"ranges_complete":true}`)
	} else {
		buf.WriteString(`],"ranges_complete":false}`)
	}
	return buf.Bytes(), nil
}

// ParseAppMetadata parses a batch's app_metadata strictly, as the official
// Rust client does (amp: crates/clients/flight/src/client.rs Metadata):
//
//   - empty metadata means no ranges and Complete false;
//   - otherwise it must be a JSON object with both "ranges" (an array, not
//     null) and "ranges_complete" (a boolean); unknown keys are ignored;
//   - every range needs numbers.start <= numbers.end, a non-empty network and
//     a 0x-prefixed 32-byte hash; prev_hash may be null or absent; timestamp
//     is optional.
//
// The error is a *MetadataError whose Field names the offending JSON path
// (e.g. "ranges[0].hash"); its Index is -1 because the batch position is
// known only to the stream, which fills it in.
func ParseAppMetadata(b []byte) (AppMetadata, error) {
	if len(b) == 0 {
		return AppMetadata{}, nil
	}
	if m, ok := scanAppMetadata(b); ok {
		return m, nil
	}
	return parseAppMetadataStrict(b)
}

// parseAppMetadataStrict is ParseAppMetadata with encoding/json: it accepts
// everything the JSON grammar allows and names the first bad field.
func parseAppMetadataStrict(b []byte) (AppMetadata, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return AppMetadata{}, metaErr(b, "", fmt.Errorf("decoding JSON object: %w", err))
	}
	if top == nil {
		return AppMetadata{}, metaErr(b, "", fmt.Errorf("metadata is null; want a JSON object"))
	}
	var m AppMetadata
	rawComplete, ok := top["ranges_complete"]
	if !ok || isNull(rawComplete) {
		return AppMetadata{}, metaErr(b, "ranges_complete", fmt.Errorf("missing; a boolean is required when app_metadata is not empty"))
	}
	if err := json.Unmarshal(rawComplete, &m.Complete); err != nil {
		return AppMetadata{}, metaErr(b, "ranges_complete", fmt.Errorf("want a boolean: %w", err))
	}
	rawRanges, ok := top["ranges"]
	if !ok || isNull(rawRanges) {
		return AppMetadata{}, metaErr(b, "ranges", fmt.Errorf("missing; an array is required when app_metadata is not empty"))
	}
	var list []json.RawMessage
	if err := json.Unmarshal(rawRanges, &list); err != nil {
		return AppMetadata{}, metaErr(b, "ranges", fmt.Errorf("want an array of block ranges: %w", err))
	}
	if len(list) > 0 {
		m.Ranges = make([]reorg.BlockRange, len(list))
	}
	for i, raw := range list {
		if field, err := checkRange(raw); err != nil {
			return AppMetadata{}, metaErr(b, fmt.Sprintf("ranges[%d]%s", i, field), err)
		}
		if err := m.Ranges[i].UnmarshalJSON(raw); err != nil {
			return AppMetadata{}, metaErr(b, fmt.Sprintf("ranges[%d]", i), err)
		}
	}
	return m, nil
}

// checkRange finds the first bad field of one block range so that the error
// names it; reorg.BlockRange.UnmarshalJSON then does the actual decoding.
func checkRange(raw json.RawMessage) (string, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		return "", fmt.Errorf("want a block range object {numbers, network, hash, prev_hash}: %s", jsonErrText(err))
	}
	rawNumbers, ok := f["numbers"]
	if !ok || isNull(rawNumbers) {
		return ".numbers", fmt.Errorf("missing; want {\"start\":N,\"end\":M}")
	}
	var nums map[string]json.RawMessage
	if err := json.Unmarshal(rawNumbers, &nums); err != nil || nums == nil {
		return ".numbers", fmt.Errorf("want an object {\"start\":N,\"end\":M}: %s", jsonErrText(err))
	}
	var start, end uint64
	for _, k := range []struct {
		name string
		dst  *uint64
	}{{"start", &start}, {"end", &end}} {
		v, ok := nums[k.name]
		if !ok || isNull(v) {
			return ".numbers." + k.name, fmt.Errorf("missing; want an unsigned block number")
		}
		if err := json.Unmarshal(v, k.dst); err != nil {
			return ".numbers." + k.name, fmt.Errorf("want an unsigned block number: %w", err)
		}
	}
	if start > end {
		return ".numbers", fmt.Errorf("start %d is after end %d", start, end)
	}
	var network string
	if v, ok := f["network"]; !ok || isNull(v) {
		return ".network", fmt.Errorf("missing; want a non-empty network id such as \"mainnet\"")
	} else if err := json.Unmarshal(v, &network); err != nil {
		return ".network", fmt.Errorf("want a string: %w", err)
	} else if network == "" {
		return ".network", fmt.Errorf("empty; want a network id such as \"mainnet\"")
	}
	var h reorg.Hash
	if v, ok := f["hash"]; !ok || isNull(v) {
		return ".hash", fmt.Errorf("missing; want 0x followed by 64 hex digits")
	} else if err := json.Unmarshal(v, &h); err != nil {
		return ".hash", err
	}
	if v, ok := f["prev_hash"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &h); err != nil {
			return ".prev_hash", err
		}
	}
	if v, ok := f["timestamp"]; ok && !isNull(v) {
		var ts uint64
		if err := json.Unmarshal(v, &ts); err != nil {
			return ".timestamp", fmt.Errorf("want unsigned Unix seconds: %w", err)
		}
	}
	return "", nil
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

func jsonErrText(err error) string {
	if err == nil {
		return "got null"
	}
	return err.Error()
}

// maxRawInError bounds how much of a bad app_metadata an error quotes.
const maxRawInError = 512

func metaErr(raw []byte, field string, err error) *MetadataError {
	s := string(raw)
	if len(s) > maxRawInError {
		s = s[:maxRawInError] + "…"
	}
	return &MetadataError{Index: -1, Field: field, Raw: s, Err: err}
}
