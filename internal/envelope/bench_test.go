package envelope

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchBody is a typical body of about 300 bytes.
var benchBody = []byte(`{"event_id":"0190a5d1-6f5e-7c3a-9b2d-3e4f5a6b7c8d","event_name":"order.order.placed.v1",` +
	`"occurred_at":"2024-05-01T10:00:00.123456+02:00","payload":{"order_id":"A-1001","customer_id":42,` +
	`"amount":{"value":"19.99","currency":"EUR"},"items":[{"sku":"X-1","qty":2},{"sku":"Y-2","qty":1}],"gift":false}}`)

func BenchmarkDecode(b *testing.B) {
	if _, err := Decode(benchBody, 0); err != nil {
		b.Fatal(err)
	}
	b.Run("typical", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(benchBody)))
		for b.Loop() {
			if _, err := Decode(benchBody, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(benchBody)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := Decode(benchBody, 0); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	// For comparison only: encoding/json into a struct, which checks far
	// less (no duplicate keys, case-insensitive keys, no UUID rules).
	b.Run("stdlib-unmarshal-reference", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(benchBody)))
		var v struct {
			EventID    string          `json:"event_id"`
			EventName  string          `json:"event_name"`
			OccurredAt string          `json:"occurred_at"`
			Payload    json.RawMessage `json:"payload"`
		}
		for b.Loop() {
			if err := json.Unmarshal(benchBody, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	env, err := Decode(benchBody, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONValidReference(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		if !json.Valid(benchBody) {
			b.Fatal("invalid")
		}
	}
}

// BenchmarkDecodeLarge decodes bodies close to DefaultMaxBodyBytes, to keep
// an eye on worst cases (many keys in one object, long strings, escapes).
func BenchmarkDecodeLarge(b *testing.B) {
	fill := func(item func(i int) string) []byte {
		var sb strings.Builder
		for i := 0; sb.Len() < DefaultMaxBodyBytes-200; i++ {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString(item(i))
		}
		return []byte(sb.String())
	}
	cases := []struct {
		name string
		body []byte
	}{
		{"many-keys-one-object", []byte(withPayload("{" + string(fill(func(i int) string { return fmt.Sprintf(`"k%d":%d`, i, i) })) + "}"))},
		{"many-small-objects", []byte(withPayload(`{"a":[` + string(fill(func(i int) string { return fmt.Sprintf(`{"id":%d,"name":"n%d","ok":true}`, i, i) })) + `]}`))},
		{"long-ascii-string", []byte(withPayload(`{"s":"` + strings.Repeat("abcdefgh", (DefaultMaxBodyBytes-300)/8) + `"}`))},
		{"escapes-and-unicode", []byte(withPayload(`{"s":"` + strings.Repeat(`\u00e9é\n`, (DefaultMaxBodyBytes-300)/10) + `"}`))},
	}
	for _, tc := range cases {
		if len(tc.body) > DefaultMaxBodyBytes {
			b.Fatalf("%s: %d bytes", tc.name, len(tc.body))
		}
		if _, err := Decode(tc.body, 0); err != nil {
			b.Fatalf("%s: %v", tc.name, err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				if _, err := Decode(tc.body, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
