package config

import (
	"testing"
)

// FuzzParse checks that no input makes Parse panic, and that a failed
// parse always explains itself.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		baseYAML,
		"",
		"exchange: !!str\n",
		"log: &x\nadmin: *x\n",
		"services: [{name: a, pools: [{<<: {name: b}}]}]\n",
		"? [a]\n: b\n",
		"log: {level: !!int 5}\n",
		"services:\n  - pools:\n    - retry: {delays: [!!str 1s, 0, ~]}\n",
		"broker: {url: \"${X:-amqp://a:b@c/}\"}\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		c, err := parse("fuzz.yaml", []byte(data), catalog, parseOptions{lookup: env{"X": "1"}.lookup})
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			if err.Error() == "" {
				t.Fatal("empty error")
			}
		}
	})
}
