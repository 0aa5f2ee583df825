package config

import (
	"fmt"
	"strings"
)

// checkBinding returns why pattern is not a valid topic binding key, or "".
// A binding is words separated by dots; "*" (exactly one word) and "#"
// (zero or more words) may only appear as whole words.
func checkBinding(pattern string) string {
	if pattern == "" {
		return "must not be empty"
	}
	if len(pattern) > amqpNameMax {
		return fmt.Sprintf("invalid binding %q: longer than %d bytes", pattern, amqpNameMax)
	}
	for _, w := range strings.Split(pattern, ".") {
		switch {
		case w == "":
			return fmt.Sprintf("invalid binding %q: empty word (words are separated by single dots)", pattern)
		case w == "*" || w == "#":
		case strings.ContainsAny(w, "*#"):
			return fmt.Sprintf("invalid binding %q: %q and %q must be whole words", pattern, "*", "#")
		}
	}
	return ""
}

// topicMatch reports whether routingKey is routed by the binding pattern
// under RabbitMQ topic-exchange semantics: "*" matches exactly one word,
// "#" zero or more words.
func topicMatch(pattern, routingKey string) bool {
	return matchWords(strings.Split(pattern, "."), strings.Split(routingKey, "."))
}

func matchWords(pat, key []string) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case "#":
			// Collapse consecutive "#": they match what one does.
			rest := pat[1:]
			for len(rest) > 0 && rest[0] == "#" {
				rest = rest[1:]
			}
			if len(rest) == 0 {
				return true
			}
			for i := 0; i <= len(key); i++ {
				if matchWords(rest, key[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(key) == 0 {
				return false
			}
		default:
			if len(key) == 0 || key[0] != pat[0] {
				return false
			}
		}
		pat, key = pat[1:], key[1:]
	}
	return len(key) == 0
}

// CheckTopicPattern returns why pattern is not a valid topic pattern (an
// event name, or words with "*" and "#" as whole words), or "".
func CheckTopicPattern(pattern string) string { return checkBinding(pattern) }

// TopicMatch reports whether routingKey is routed by the binding pattern
// under RabbitMQ topic-exchange semantics: "*" matches exactly one word,
// "#" zero or more words.
func TopicMatch(pattern, routingKey string) bool { return topicMatch(pattern, routingKey) }
