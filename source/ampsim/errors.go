package ampsim

import "errors"

var (
	// ErrClosed is returned by Start after Close.
	ErrClosed = errors.New("ampsim: server closed")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("ampsim: server already started")
	// ErrInvalidReorg is returned by Chain.Reorg for an impossible depth.
	ErrInvalidReorg = errors.New("ampsim: invalid reorg")
	// ErrUnknownNetwork is returned by Server.Chain for a network that is not
	// configured.
	ErrUnknownNetwork = errors.New("ampsim: unknown network")
)
