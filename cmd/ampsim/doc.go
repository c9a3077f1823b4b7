// Command ampsim runs the Amp server simulator (package source/ampsim)
// standalone, so any Arrow Flight client (the bridge, pyarrow, the Amp
// Python SDK) can be pointed at it:
//
//	ampsim -addr 127.0.0.1:1602 -blocks 100 -block-interval 2s -reorg-every 10
//
// It prints "ampsim listening on <host:port>" once it serves, then runs until
// SIGINT or SIGTERM. Query it with e.g.
// SELECT * FROM eth_rpc.transactions SETTINGS stream = true.
//
// For throughput runs, -replay-blocks 64 -batch-rows 10000 serves the rows
// of 64 pre-generated template blocks (ampsim.Config.ReplayBlocks), so the
// simulator costs little per row.
//
// -tls-cert and -tls-key serve TLS instead of plaintext; with AMPSIM_TOKEN
// set in its environment every call must carry "authorization: Bearer
// $AMPSIM_TOKEN" (a hosted gateway; UNAUTHENTICATED otherwise).
package main
