package ampsim

import (
	"fmt"
	"strings"
)

// Hidden columns model a dataset whose schema changes between versions: a
// column hidden from a table is not in it at all (SELECT * leaves it out, a
// query naming it fails as Amp fails on an unknown column), and showing it
// again (SetHiddenColumns) makes every query that selects it, SELECT *
// included, return it for every block, as a new dataset version that adds a
// column does. Plans are made per request, so a stream that reconnects or a
// bridge that restarts sees the new schema; a running DoGet keeps its own.

// hiddenKey is the key of a hidden column: "dataset.table.column".
func hiddenKey(dataset, table, column string) string { return dataset + "." + table + "." + column }

// parseHidden validates HiddenColumns entries ("table.column" on the
// primary network's dataset, or "dataset.table.column") and returns their
// keys.
func (c Config) parseHidden(entries []string) (map[string]bool, error) {
	out := map[string]bool{}
	datasets := map[string]bool{c.Dataset: true}
	for _, n := range c.ExtraNetworks {
		datasets[n.Dataset] = true
	}
	for _, e := range entries {
		parts := strings.Split(e, ".")
		if len(parts) == 2 {
			parts = append([]string{c.Dataset}, parts...)
		}
		if len(parts) != 3 || !datasets[parts[0]] {
			return nil, fmt.Errorf("ampsim: hidden column %q: want table.column or dataset.table.column of a served dataset", e)
		}
		t := tableDef(parts[1])
		if t == nil {
			return nil, fmt.Errorf("ampsim: hidden column %q names no table; want blocks, transactions or logs", e)
		}
		if len(t.schema.FieldIndices(parts[2])) == 0 {
			return nil, fmt.Errorf("ampsim: hidden column %q: table %s has no column %q", e, parts[1], parts[2])
		}
		if parts[2] == "_block_num" {
			return nil, fmt.Errorf("ampsim: hidden column %q: _block_num cannot be hidden", e)
		}
		out[hiddenKey(parts[0], parts[1], parts[2])] = true
	}
	return out, nil
}

// SetHiddenColumns replaces the hidden columns (see Config.HiddenColumns);
// nil shows every column. Queries planned from now on see the change.
func (s *Server) SetHiddenColumns(columns []string) error {
	h, err := s.cfg.parseHidden(columns)
	if err != nil {
		return err
	}
	s.hiddenMu.Lock()
	s.hidden = h
	s.hiddenMu.Unlock()
	return nil
}

// isHidden reports whether column of table in dataset is hidden.
func (s *Server) isHidden(dataset, table, column string) bool {
	s.hiddenMu.RLock()
	defer s.hiddenMu.RUnlock()
	return s.hidden[hiddenKey(dataset, table, column)]
}
