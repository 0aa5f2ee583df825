package envelope

import (
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// unhex maps an ASCII hex digit to its value and every other byte to 0xff.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
		t[c-'a'+'A'] = byte(c-'a') + 10
	}
	return t
}()

// uuidHexPos are the offsets of the 16 hex digit pairs of a canonical UUID.
var uuidHexPos = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// parseUUID parses a canonical 8-4-4-4-12 UUID (hex digits in either case)
// and checks it with checkUUID. Unlike uuid.Parse it refuses braces, the
// urn:uuid: prefix and the form without hyphens.
func parseUUID(b []byte) (uuid.UUID, *FieldError) {
	var u uuid.UUID
	if len(b) != 36 {
		return u, &FieldError{Field: FieldEventID, Reason: "must be a canonical UUID (36 characters, 8-4-4-4-12 with hyphens), got " + strconv.Itoa(len(b)) + " bytes"}
	}
	b = b[:36]
	for _, i := range [...]int{8, 13, 18, 23} {
		if b[i] != '-' {
			return u, &FieldError{Field: FieldEventID, Reason: "must be a canonical UUID (8-4-4-4-12 with hyphens): expected '-' at position " + strconv.Itoa(i)}
		}
	}
	var bad byte
	for j, p := range uuidHexPos {
		hi, lo := unhex[b[p]], unhex[b[p+1]]
		bad |= hi | lo
		u[j] = hi<<4 | lo
	}
	if bad > 15 {
		for _, p := range uuidHexPos {
			for _, i := range [2]int{int(p), int(p) + 1} {
				if unhex[b[i]] > 15 {
					return uuid.UUID{}, &FieldError{Field: FieldEventID, Reason: "must be a canonical UUID: invalid hex digit at position " + strconv.Itoa(i)}
				}
			}
		}
	}
	return u, checkUUID(u)
}

// checkUUID refuses the nil and max UUIDs, variants other than RFC 9562
// (10xx) and versions outside 1..8.
func checkUUID(u uuid.UUID) *FieldError {
	switch u {
	case uuid.Nil:
		return &FieldError{Field: FieldEventID, Reason: "the nil UUID is not a valid event id"}
	case uuid.Max:
		return &FieldError{Field: FieldEventID, Reason: "the max UUID is not a valid event id"}
	}
	if u[8]&0xc0 != 0x80 {
		return &FieldError{Field: FieldEventID, Reason: "UUID variant must be RFC 9562 (10xx)"}
	}
	if v := u[6] >> 4; v < 1 || v > 8 {
		return &FieldError{Field: FieldEventID, Reason: "UUID version must be 1 to 8, got " + strconv.Itoa(int(v))}
	}
	return nil
}

// uuidHex writes u in canonical lower-case form.
func uuidHex(dst *[36]byte, u uuid.UUID) {
	const hexdig = "0123456789abcdef"
	j := 0
	for i, c := range u {
		switch i {
		case 4, 6, 8, 10:
			dst[j] = '-'
			j++
		}
		dst[j] = hexdig[c>>4]
		dst[j+1] = hexdig[c&0x0f]
		j += 2
	}
}

// checkEventName checks the unescaped event_name value.
func checkEventName[T string | []byte](b T) *FieldError {
	if len(b) == 0 {
		return &FieldError{Field: FieldEventName, Reason: "must not be empty"}
	}
	if len(b) > MaxEventNameBytes {
		return &FieldError{Field: FieldEventName, Reason: "must be at most " + strconv.Itoa(MaxEventNameBytes) + " bytes, got " + strconv.Itoa(len(b))}
	}
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == 0x7f {
				return &FieldError{Field: FieldEventName, Reason: "must not contain whitespace or control characters (byte " + strconv.Itoa(i) + ")"}
			}
			i++
			continue
		}
		var r rune
		var size int
		switch s := any(b).(type) {
		case string:
			r, size = utf8.DecodeRuneInString(s[i:])
		case []byte:
			r, size = utf8.DecodeRune(s[i:])
		}
		if r == utf8.RuneError && size == 1 {
			return &FieldError{Field: FieldEventName, Reason: "invalid UTF-8 (byte " + strconv.Itoa(i) + ")"}
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return &FieldError{Field: FieldEventName, Reason: "must not contain whitespace or control characters (byte " + strconv.Itoa(i) + ")"}
		}
		i += size
	}
	return nil
}

func digits2(b []byte) (int, bool) {
	d0, d1 := b[0]-'0', b[1]-'0'
	if d0 > 9 || d1 > 9 {
		return 0, false
	}
	return int(d0)*10 + int(d1), true
}

func daysIn(m, year int) int {
	switch m {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// maxQuoted bounds how much of a bad value is quoted in an error reason.
const maxQuoted = 64

func quoteValue(b []byte) string {
	if len(b) > maxQuoted {
		n := maxQuoted
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}

func badTime(b []byte, why string) *FieldError {
	return &FieldError{Field: FieldOccurredAt, Reason: "must be an RFC 3339 date-time like \"2006-01-02T15:04:05.999999999Z07:00\": " + why + " in " + quoteValue(b)}
}

// parseOccurredAt parses the strict RFC 3339 profile described in the
// package documentation:
//
//	YYYY-MM-DDTHH:MM:SS[.F{1,9}](Z|(+|-)HH:MM)
func parseOccurredAt(b []byte) (time.Time, *FieldError) {
	if len(b) < len("2006-01-02T15:04:05Z") {
		return time.Time{}, badTime(b, "too short")
	}
	y1, ok1 := digits2(b[0:2])
	y2, ok2 := digits2(b[2:4])
	month, ok3 := digits2(b[5:7])
	day, ok4 := digits2(b[8:10])
	hour, ok5 := digits2(b[11:13])
	minute, ok6 := digits2(b[14:16])
	sec, ok7 := digits2(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) ||
		b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, badTime(b, "bad layout")
	}
	year := y1*100 + y2
	switch {
	case month < 1 || month > 12:
		return time.Time{}, badTime(b, "month out of range")
	case day < 1 || day > daysIn(month, year):
		return time.Time{}, badTime(b, "day out of range")
	case hour > 23:
		return time.Time{}, badTime(b, "hour out of range")
	case minute > 59:
		return time.Time{}, badTime(b, "minute out of range")
	case sec > 59:
		return time.Time{}, badTime(b, "second out of range")
	}
	i := 19
	nsec := 0
	if b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			if i-start == 9 {
				return time.Time{}, badTime(b, "more than 9 fractional digits")
			}
			nsec = nsec*10 + int(b[i]-'0')
			i++
		}
		n := i - start
		if n == 0 {
			return time.Time{}, badTime(b, "empty fraction")
		}
		for ; n < 9; n++ {
			nsec *= 10
		}
	}
	loc := time.UTC
	switch rest := b[i:]; {
	case len(rest) == 1 && rest[0] == 'Z':
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, okh := digits2(rest[1:3])
		om, okm := digits2(rest[4:6])
		if !okh || !okm {
			return time.Time{}, badTime(b, "bad zone offset")
		}
		if oh > 23 || om > 59 {
			return time.Time{}, badTime(b, "zone offset out of range")
		}
		off := (oh*60 + om) * 60
		if rest[0] == '-' {
			off = -off
		}
		if off != 0 {
			loc = time.FixedZone("", off)
		}
	default:
		return time.Time{}, badTime(b, "zone must be Z or ±hh:mm")
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc), nil
}
