package ampsim

import (
	"context"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Status messages of a refused call (Config.Token), UNAUTHENTICATED like a
// hosted Amp gateway's.
const (
	msgNoToken    = "missing bearer token: send the header authorization: Bearer <token>"
	msgWrongToken = "invalid bearer token"
)

// checkToken returns nil when ctx carries "authorization: Bearer
// <Config.Token>", an UNAUTHENTICATED status otherwise.
func (s *Server) checkToken(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	v, ok := firstHeader(md, "authorization")
	if !ok || v == "" {
		return status.Error(codes.Unauthenticated, msgNoToken)
	}
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return status.Error(codes.Unauthenticated, msgNoToken)
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.cfg.Token)) != 1 {
		return status.Error(codes.Unauthenticated, msgWrongToken)
	}
	return nil
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.checkToken(ctx); err != nil {
		s.cfg.Logger.Debug("refused a call", "method", info.FullMethod, "error", err)
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.checkToken(ss.Context()); err != nil {
		s.cfg.Logger.Debug("refused a call", "method", info.FullMethod, "error", err)
		return err
	}
	return handler(srv, ss)
}
