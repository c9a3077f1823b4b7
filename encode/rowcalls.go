package encode

// writeRow appends the columns of row i. Each of the first unrolledCols
// columns has its own call site, so every indirect call always goes to the
// same writer and the CPU predicts it; a single loop over the writers would
// send one call site to a different writer per column and mispredict
// (measured: 10–15% of the row time on the transactions table). The blocks
// below are identical but for the index.
func writeRow(b []byte, ws []writer, i int) []byte {
	n := len(ws)
	if n <= 0 {
		return b
	}
	b = ws[0].write(b, i)
	if n <= 1 {
		return b
	}
	b = ws[1].write(b, i)
	if n <= 2 {
		return b
	}
	b = ws[2].write(b, i)
	if n <= 3 {
		return b
	}
	b = ws[3].write(b, i)
	if n <= 4 {
		return b
	}
	b = ws[4].write(b, i)
	if n <= 5 {
		return b
	}
	b = ws[5].write(b, i)
	if n <= 6 {
		return b
	}
	b = ws[6].write(b, i)
	if n <= 7 {
		return b
	}
	b = ws[7].write(b, i)
	if n <= 8 {
		return b
	}
	b = ws[8].write(b, i)
	if n <= 9 {
		return b
	}
	b = ws[9].write(b, i)
	if n <= 10 {
		return b
	}
	b = ws[10].write(b, i)
	if n <= 11 {
		return b
	}
	b = ws[11].write(b, i)
	if n <= 12 {
		return b
	}
	b = ws[12].write(b, i)
	if n <= 13 {
		return b
	}
	b = ws[13].write(b, i)
	if n <= 14 {
		return b
	}
	b = ws[14].write(b, i)
	if n <= 15 {
		return b
	}
	b = ws[15].write(b, i)
	if n <= 16 {
		return b
	}
	b = ws[16].write(b, i)
	if n <= 17 {
		return b
	}
	b = ws[17].write(b, i)
	if n <= 18 {
		return b
	}
	b = ws[18].write(b, i)
	if n <= 19 {
		return b
	}
	b = ws[19].write(b, i)
	if n <= 20 {
		return b
	}
	b = ws[20].write(b, i)
	if n <= 21 {
		return b
	}
	b = ws[21].write(b, i)
	if n <= 22 {
		return b
	}
	b = ws[22].write(b, i)
	if n <= 23 {
		return b
	}
	b = ws[23].write(b, i)
	if n <= 24 {
		return b
	}
	b = ws[24].write(b, i)
	if n <= 25 {
		return b
	}
	b = ws[25].write(b, i)
	if n <= 26 {
		return b
	}
	b = ws[26].write(b, i)
	if n <= 27 {
		return b
	}
	b = ws[27].write(b, i)
	if n <= 28 {
		return b
	}
	b = ws[28].write(b, i)
	if n <= 29 {
		return b
	}
	b = ws[29].write(b, i)
	if n <= 30 {
		return b
	}
	b = ws[30].write(b, i)
	if n <= 31 {
		return b
	}
	b = ws[31].write(b, i)
	if n <= 32 {
		return b
	}
	b = ws[32].write(b, i)
	if n <= 33 {
		return b
	}
	b = ws[33].write(b, i)
	if n <= 34 {
		return b
	}
	b = ws[34].write(b, i)
	if n <= 35 {
		return b
	}
	b = ws[35].write(b, i)
	if n <= 36 {
		return b
	}
	b = ws[36].write(b, i)
	if n <= 37 {
		return b
	}
	b = ws[37].write(b, i)
	if n <= 38 {
		return b
	}
	b = ws[38].write(b, i)
	if n <= 39 {
		return b
	}
	b = ws[39].write(b, i)
	if n <= 40 {
		return b
	}
	b = ws[40].write(b, i)
	if n <= 41 {
		return b
	}
	b = ws[41].write(b, i)
	if n <= 42 {
		return b
	}
	b = ws[42].write(b, i)
	if n <= 43 {
		return b
	}
	b = ws[43].write(b, i)
	if n <= 44 {
		return b
	}
	b = ws[44].write(b, i)
	if n <= 45 {
		return b
	}
	b = ws[45].write(b, i)
	if n <= 46 {
		return b
	}
	b = ws[46].write(b, i)
	if n <= 47 {
		return b
	}
	b = ws[47].write(b, i)
	if n <= 48 {
		return b
	}
	b = ws[48].write(b, i)
	if n <= 49 {
		return b
	}
	b = ws[49].write(b, i)
	if n <= 50 {
		return b
	}
	b = ws[50].write(b, i)
	if n <= 51 {
		return b
	}
	b = ws[51].write(b, i)
	if n <= 52 {
		return b
	}
	b = ws[52].write(b, i)
	if n <= 53 {
		return b
	}
	b = ws[53].write(b, i)
	if n <= 54 {
		return b
	}
	b = ws[54].write(b, i)
	if n <= 55 {
		return b
	}
	b = ws[55].write(b, i)
	if n <= 56 {
		return b
	}
	b = ws[56].write(b, i)
	if n <= 57 {
		return b
	}
	b = ws[57].write(b, i)
	if n <= 58 {
		return b
	}
	b = ws[58].write(b, i)
	if n <= 59 {
		return b
	}
	b = ws[59].write(b, i)
	if n <= 60 {
		return b
	}
	b = ws[60].write(b, i)
	if n <= 61 {
		return b
	}
	b = ws[61].write(b, i)
	if n <= 62 {
		return b
	}
	b = ws[62].write(b, i)
	if n <= 63 {
		return b
	}
	b = ws[63].write(b, i)
	for _, w := range ws[64:] {
		b = w.write(b, i)
	}
	return b
}

// unrolledCols is the number of columns writeRow calls from their own site.
const unrolledCols = 64
