// Package ampsim is a faithful Amp server simulator: a real Arrow Flight
// (gRPC) server that speaks Amp's query-streaming protocol exactly as
// amp-protocol.md §1–4 and §9 describe it, driven by a scripted chain.
//
// # What it serves
//
// A [Server] holds one chain per network (the primary network of
// [Config] plus [Config.ExtraNetworks]). Each network belongs to one dataset
// with the three EVM-RPC tables "blocks", "transactions" and "logs" and Amp's
// exact Arrow schemas (§4.3, see [TableSchema]). Rows are synthetic but
// realistic and deterministic: they are derived from the block hash, so a
// reorged block has different hashes and rows.
//
// Blocks are added with [Chain.Mine], replaced with [Chain.Reorg], or on a
// timer ([Config.BlockInterval], [Config.ReorgEvery]). Block hashes are
// sha256(fork seed, network, number, parent hash); every block ever created
// is stored, so a resume cursor on an abandoned fork is walked back exactly as
// Amp does (§2.5).
//
// # Protocol
//
//   - GetFlightInfo accepts only CMD descriptors holding
//     Any(arrow.flight.protocol.sql.CommandStatementQuery) and reads the
//     amp-stream and amp-resume headers (§1.2); the returned ticket fixes the
//     SQL, the streaming flag and the cursor.
//   - DoGet streams the §2.2 sequence (streaming) or the §2.6 sequence
//     (batch), with JSON app_metadata on every record batch, ~2 MiB zero-copy
//     splits (§2.4) and keep-alives per [KeepAlivePolicy].
//   - With [Config.TLS] (or TLSCertFile/TLSKeyFile) it serves TLS instead
//     of plaintext h2c; with [Config.Token] every call must carry
//     "authorization: Bearer <token>" and fails with UNAUTHENTICATED
//     otherwise, as a hosted gateway does (ampd itself serves plaintext and
//     ignores the header).
//   - Every other RPC returns UNIMPLEMENTED. Handshake also returns
//     UNIMPLEMENTED (the real server panics instead; never call it).
//
// The real server clamps the keep-alive interval to at least 30 s; the
// simulator accepts any positive interval so tests can run in milliseconds.
// Not simulated: /healthz on the Flight port, the JSON-Lines endpoint,
// block_num() and other UDFs, per-query memory limits.
//
// Batches with rows are cut at BatchRows rows (DataFusion's batch size,
// whatever blocks they hold) and, in streaming mode when _block_num is
// selected, at most once more at a block boundary, as Amp's
// MessageStreamWithBlockComplete cuts them: a batch that starts in the
// block the previous batch of the microbatch ended in and reaches a later
// block is cut at the later block's first row. Each part is then split
// into ~2 MiB messages by the size of the batch it came from (Amp sizes a
// slice by the buffers it shares).
// Scans without a WHERE clause are generated straight into Arrow builders;
// filtered scans go through a row path (both produce identical batches).
//
// # Replay mode
//
// Generating a mainnet transaction row costs about a microsecond, as much as
// the bridge spends on it, so throughput benchmarks set
// [Config.ReplayBlocks]: the transactions and logs rows of that many
// template blocks are generated once and every block serves one template's
// rows with its own block columns (see replay.go). Unfiltered single-table
// scans (without DictionaryStrings or LIMIT) are then zero-copy slices of
// pre-built Arrow batches. Messages and metadata follow the same rules as
// without replay, and batches are cut by the same rules (BatchRows, the
// block cut when _block_num is selected, the 2 MiB split sized by the rows
// of the batch, not by the template buffers its slices share); a block has
// its template's rows.
//
// # Table names
//
// A table is named with its dataset: dataset.table, "namespace/dataset".table
// or "namespace/dataset@version".table (any version is accepted), e.g.
// eth_rpc.blocks, "edgeandnode/eth_rpc".transactions. An unqualified table
// name is rejected, as Amp does.
//
// A table's schema can change while the server runs, as a new dataset
// version that adds columns does: [Config.HiddenColumns] leaves columns out
// of their table and [Server.SetHiddenColumns] shows or hides them for the
// queries planned from then on (a reconnect, a restarted client), SELECT *
// included (schema evolution tests).
//
// # SQL subset
//
// SELECT * or a list of columns (optionally table-qualified, quoted with
// double quotes, renamed with AS), FROM one table or from a parenthesised
// subquery with an alias (the backfill wrapper of design.md §7), WHERE with
// =, !=, <>, <, <=, >, >=, AND, OR, NOT, parentheses, IS [NOT] NULL, and
// literals: integers, 'strings', X'hex' binary, TRUE/FALSE, NULL. Binary and
// fixed-size binary columns also compare with '0x…' string literals,
// timestamps with RFC 3339 strings. A trailing SETTINGS stream = true makes
// the query streaming (only the boolean literal true, §1.2). SELECT a, b FROM
// x UNION ALL SELECT a, b FROM y combines tables (possibly of different
// networks: a batch query then reports one range per network, §2.6).
//
// Non-incremental queries (COUNT(*) and other aggregates, DISTINCT, GROUP BY,
// ORDER BY, LIMIT) plan fine; a streaming DoGet on them fails with
// INVALID_ARGUMENT "invalid query: non-incremental queries are not supported
// for streaming, …" (scenario A18). In batch mode COUNT(*), LIMIT and
// DISTINCT are executed; the others are refused with INVALID_ARGUMENT
// naming the unsupported feature. A subquery with LIMIT or DISTINCT is
// evaluated whole, as SQL says: SELECT * FROM (… LIMIT n) AS p WHERE …
// keeps the LIMIT's rows of every synced block and then filters them (the
// backfill's partition wrapper around such a query; a COUNT(*) subquery is
// refused). Anything else is INVALID_ARGUMENT naming what is unsupported.
//
// # Test controls
//
// [Server.InjectFault] ends, stalls or cuts the next DoGet after K batches;
// [Server.DropConnections] cuts every connection; [Server.EnqueueScript]
// makes the next DoGet send exact batches, optionally delayed (for client
// negative tests); [Config.OnRequest] and [Server.Requests] expose the headers
// of every call; [Config.UnsyncedTables] and InitialBlocks = 0 model datasets
// without synced data (scenarios A3, A17).
package ampsim
