package main

// This file reads platformd's counters from its Prometheus endpoint
// (/metrics, the text exposition format), summed over the demo's pools.
// Only documented metric names and labels are read (docs/operations.md).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Label values of platformd_messages_total{outcome} and
// platformd_duplicates_total{source}.
const (
	outProcessed = "processed"
	outDuplicate = "duplicate"
	outRetried   = "retried"
	outFailed    = "failed"
	outRejected  = "rejected"

	srcRepublish  = "republish"
	srcRedelivery = "redelivery"
	srcReplay     = "replay"
)

// counters is one scrape of platformd's metrics, summed over the demo's
// pools. Counters start from zero with every platformd process.
type counters struct {
	outcome  map[string]float64 // platformd_messages_total by outcome
	source   map[string]float64 // platformd_duplicates_total by source
	inFlight float64            // platformd_pool_in_flight
}

func newCounters() *counters {
	return &counters{outcome: map[string]float64{}, source: map[string]float64{}}
}

// deliveries is the number of deliveries settled, whatever their outcome.
func (c counters) deliveries() float64 {
	var n float64
	for _, v := range c.outcome {
		n += v
	}
	return n
}

// add returns c + o.
func (c counters) add(o counters) counters {
	r := counters{outcome: map[string]float64{}, source: map[string]float64{}, inFlight: c.inFlight + o.inFlight}
	for _, m := range []map[string]float64{c.outcome, o.outcome} {
		for k, v := range m {
			r.outcome[k] += v
		}
	}
	for _, m := range []map[string]float64{c.source, o.source} {
		for k, v := range m {
			r.source[k] += v
		}
	}
	return r
}

// scraper reads platformd's Prometheus endpoint.
type scraper struct {
	url    string
	pools  map[string]bool
	client *http.Client
}

func newScraper(listen string, pools []string) (*scraper, error) {
	if listen == "" || listen == "-" {
		return nil, errors.New("metrics.listen is disabled in the config: the demo reads platformd's counters there")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen %q: %w", listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	s := &scraper{
		url:    "http://" + net.JoinHostPort(host, port) + "/metrics",
		pools:  map[string]bool{},
		client: &http.Client{Timeout: 2 * time.Second},
	}
	for _, p := range pools {
		s.pools[p] = true
	}
	return s, nil
}

// scrape reads the endpoint once.
func (s *scraper) scrape(ctx context.Context) (counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return counters{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return counters{}, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return counters{}, fmt.Errorf("scrape %s: %s", s.url, resp.Status)
	}
	return s.collect(resp.Body)
}

// collect sums the samples of the scraper's pools in a metrics page.
func (s *scraper) collect(r io.Reader) (counters, error) {
	c := newCounters()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, v, err := parseSample(line)
		if err != nil {
			return *c, err
		}
		if !s.pools[labels["pool"]] {
			continue
		}
		switch name {
		case "platformd_messages_total":
			c.outcome[labels["outcome"]] += v
		case "platformd_duplicates_total":
			c.source[labels["source"]] += v
		case "platformd_pool_in_flight":
			c.inFlight += v
		}
	}
	if err := sc.Err(); err != nil {
		return *c, fmt.Errorf("read metrics: %w", err)
	}
	return *c, nil
}

// parseSample parses one sample line: name, optional {labels}, value and
// an optional timestamp. Label values are unescaped (\\, \" and \n).
func parseSample(line string) (name string, labels map[string]string, v float64, err error) {
	bad := func(why string) error { return fmt.Errorf("metrics line %q: %s", line, why) }
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, 0, bad("no value")
	}
	name, rest := line[:i], line[i:]
	labels = map[string]string{}
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq <= 0 {
				return "", nil, 0, bad("malformed labels")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				switch ch := rest[j]; {
				case ch == '\\' && j+1 < len(rest):
					j++
					if rest[j] == 'n' {
						val.WriteByte('\n')
					} else {
						val.WriteByte(rest[j])
					}
				case ch == '"':
					rest, closed = rest[j+1:], true
				default:
					val.WriteByte(ch)
				}
				if closed {
					break
				}
			}
			if !closed {
				return "", nil, 0, bad("unterminated label value")
			}
			labels[key] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, bad("no value")
	}
	if v, err = strconv.ParseFloat(fields[0], 64); err != nil {
		return "", nil, 0, bad("value: " + err.Error())
	}
	return name, labels, v, nil
}
