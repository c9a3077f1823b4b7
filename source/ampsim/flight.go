package ampsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
	pb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// CommandStatementQueryTypeURL is the Any type URL Amp accepts in a CMD
// descriptor.
const CommandStatementQueryTypeURL = "type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"

// ticket is the simulator's ticket: JSON of the SQL, the streaming flag and
// the cursor, fixed at GetFlightInfo time (§1.3).
type ticket struct {
	SQL       string                 `json:"sql"`
	Streaming bool                   `json:"streaming"`
	Cursor    map[string]reorg.Point `json:"cursor,omitempty"`
	HasCursor bool                   `json:"has_cursor,omitempty"`
}

// parseResume parses an amp-resume value as serde_json would: an object of
// network → {number, hash}, both required. ok is false when the value must
// be ignored (§1.2: a parse failure is silently ignored).
func parseResume(v string) (map[string]reorg.Point, bool) {
	if v == "" {
		return nil, false
	}
	var raw map[string]struct {
		Number *uint64     `json:"number"`
		Hash   *reorg.Hash `json:"hash"`
	}
	if err := json.Unmarshal([]byte(v), &raw); err != nil || raw == nil {
		return nil, false
	}
	out := make(map[string]reorg.Point, len(raw))
	for n, p := range raw {
		if p.Number == nil || p.Hash == nil {
			return nil, false
		}
		out[n] = reorg.Point{Number: *p.Number, Hash: *p.Hash}
	}
	return out, true
}

// parseStreamHeader parses amp-stream: true/1 and false/0 (ASCII case
// insensitive) decide; anything else is ignored.
func parseStreamHeader(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "true", "1":
		return true, true
	case "false", "0":
		return false, true
	}
	return false, false
}

func firstHeader(md metadata.MD, key string) (string, bool) {
	vs := md.Get(key)
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

func sqlStatus(err error) error {
	var se *sqlError
	if errors.As(err, &se) {
		return status.Error(codes.InvalidArgument, se.msg)
	}
	return status.Error(codes.Internal, err.Error())
}

// GetFlightInfo implements §1.2.
func (s *Server) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if desc.GetType() != flight.DescriptorCMD {
		s.record(RequestInfo{Method: "GetFlightInfo", Header: md})
		return nil, status.Error(codes.InvalidArgument, "unsupported flight descriptor type: "+desc.GetType().String()+"; send a CMD descriptor holding Any(CommandStatementQuery)")
	}
	var anyMsg anypb.Any
	if err := proto.Unmarshal(desc.GetCmd(), &anyMsg); err != nil {
		s.record(RequestInfo{Method: "GetFlightInfo", Header: md})
		return nil, status.Error(codes.InvalidArgument, "pb decode error: the descriptor command is not a protobuf Any: "+err.Error())
	}
	if anyMsg.GetTypeUrl() != CommandStatementQueryTypeURL {
		s.record(RequestInfo{Method: "GetFlightInfo", Header: md})
		return nil, status.Error(codes.InvalidArgument, "unsupported flight descriptor command: "+anyMsg.GetTypeUrl())
	}
	var cmd pb.CommandStatementQuery
	if err := proto.Unmarshal(anyMsg.GetValue(), &cmd); err != nil {
		s.record(RequestInfo{Method: "GetFlightInfo", Header: md})
		return nil, status.Error(codes.InvalidArgument, "pb decode error: decoding CommandStatementQuery: "+err.Error())
	}
	t := ticket{SQL: cmd.GetQuery()}
	p, err := s.planSQL(t.SQL)
	if err != nil {
		s.record(RequestInfo{Method: "GetFlightInfo", Header: md, SQL: t.SQL})
		return nil, sqlStatus(err)
	}
	t.Streaming = p.streamSetting
	if v, ok := firstHeader(md, "amp-stream"); ok {
		if b, ok := parseStreamHeader(v); ok {
			t.Streaming = b
		}
	}
	rawCursor := ""
	if v, ok := firstHeader(md, "amp-resume"); ok {
		if c, ok := parseResume(v); ok {
			t.Cursor, t.HasCursor, rawCursor = c, true, v
		}
	}
	s.record(RequestInfo{Method: "GetFlightInfo", Header: md, SQL: t.SQL, Streaming: t.Streaming, Cursor: rawCursor})
	if !t.Streaming && len(p.rel.unsupported) > 0 {
		return nil, status.Error(codes.InvalidArgument, unsupportedMsg(p))
	}
	tb, err := json.Marshal(t)
	if err != nil {
		return nil, status.Error(codes.Internal, "ticket encoding error: "+err.Error())
	}
	return &flight.FlightInfo{
		Schema:           flight.SerializeSchema(p.schema, s.cfg.Allocator),
		FlightDescriptor: desc,
		Endpoint:         []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: tb}}},
		TotalRecords:     -1,
		TotalBytes:       -1,
	}, nil
}

func unsupportedMsg(p *plan) string {
	return fmt.Sprintf("unsupported SQL: %s is not supported by the simulator in batch queries", strings.Join(p.rel.unsupported, ", "))
}

// DoGet implements §1.4 and §2.
func (s *Server) DoGet(tk *flight.Ticket, stream flight.FlightService_DoGetServer) error {
	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	var t ticket
	if err := json.Unmarshal(tk.GetTicket(), &t); err != nil {
		s.record(RequestInfo{Method: "DoGet", Header: md})
		return status.Error(codes.InvalidArgument, "ticket decoding error: "+err.Error())
	}
	ri := RequestInfo{Method: "DoGet", Header: md, SQL: t.SQL, Streaming: t.Streaming}
	if t.HasCursor {
		b, _ := json.Marshal(t.Cursor)
		ri.Cursor = string(b)
	}
	s.record(ri)
	p, err := s.planSQL(t.SQL)
	if err != nil {
		return sqlStatus(err)
	}
	w := s.newStreamWriter(stream, p.schema)
	defer w.release()
	if f, ok := s.takeFault(); ok {
		w.fault = &f
	}
	if sc, ok := s.takeScript(); ok {
		return s.runScript(ctx, w, p, sc)
	}
	if !t.Streaming {
		if len(p.rel.unsupported) > 0 {
			return status.Error(codes.InvalidArgument, unsupportedMsg(p))
		}
		return s.runBatch(ctx, w, p)
	}
	if len(p.rel.nonInc) > 0 {
		return status.Error(codes.InvalidArgument, "invalid query: non-incremental queries are not supported for streaming, found: "+
			strings.Join(dedup(p.rel.nonInc), ", ")+"; remove them or run the query without SETTINGS stream = true")
	}
	return s.runStream(ctx, w, p, t)
}

func dedup(in []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func unimplemented(method string) error {
	return status.Error(codes.Unimplemented, method+" is not implemented by Amp; use GetFlightInfo then DoGet")
}

// Handshake is not implemented (the real server panics; never call it).
func (s *Server) Handshake(flight.FlightService_HandshakeServer) error {
	return unimplemented("Handshake")
}

// ListFlights is UNIMPLEMENTED, as in Amp.
func (s *Server) ListFlights(*flight.Criteria, flight.FlightService_ListFlightsServer) error {
	return unimplemented("ListFlights")
}

// PollFlightInfo is UNIMPLEMENTED, as in Amp.
func (s *Server) PollFlightInfo(context.Context, *flight.FlightDescriptor) (*flight.PollInfo, error) {
	return nil, unimplemented("PollFlightInfo")
}

// GetSchema is UNIMPLEMENTED, as in Amp.
func (s *Server) GetSchema(context.Context, *flight.FlightDescriptor) (*flight.SchemaResult, error) {
	return nil, unimplemented("GetSchema")
}

// DoPut is UNIMPLEMENTED, as in Amp.
func (s *Server) DoPut(flight.FlightService_DoPutServer) error { return unimplemented("DoPut") }

// DoExchange is UNIMPLEMENTED, as in Amp.
func (s *Server) DoExchange(flight.FlightService_DoExchangeServer) error {
	return unimplemented("DoExchange")
}

// DoAction is UNIMPLEMENTED, as in Amp.
func (s *Server) DoAction(*flight.Action, flight.FlightService_DoActionServer) error {
	return unimplemented("DoAction")
}

// ListActions is UNIMPLEMENTED, as in Amp.
func (s *Server) ListActions(*flight.Empty, flight.FlightService_ListActionsServer) error {
	return unimplemented("ListActions")
}

// dictSchema turns Utf8 columns into Dictionary<Int32, Utf8>.
func dictSchema(sc *arrow.Schema) *arrow.Schema {
	fields := sc.Fields()
	for i, f := range fields {
		if f.Type.ID() == arrow.STRING {
			fields[i].Type = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
		}
	}
	return arrow.NewSchema(fields, nil)
}
