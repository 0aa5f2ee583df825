package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

var durationType = reflect.TypeFor[time.Duration]()

// maxMergeDepth bounds nested merge keys (<<), which could otherwise loop
// through aliases.
const maxMergeDepth = 32

// decoder walks a YAML syntax tree against a Go value, guided by the
// value's type and its yaml tags. It expands environment references in
// string scalars, records every problem with its path and remembers which
// paths were present (for defaults).
type decoder struct {
	ps      *problems
	lookup  func(string) (string, bool)
	anchors map[string][]anchorDef // every anchor of a name, in document order
	set     map[string]bool
}

// anchorDef is one anchor of a name: where it stands and the node it
// names.
type anchorDef struct {
	line, col int
	node      ast.Node
}

// decodeYAML parses data and decodes it into out (a pointer to a struct).
// It returns the set of paths present in the document with a non-null
// value.
func decodeYAML(ps *problems, data []byte, out any, lookup func(string) (string, bool)) map[string]bool {
	d := &decoder{ps: ps, lookup: lookup, anchors: make(map[string][]anchorDef), set: make(map[string]bool)}
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		d.syntaxError(err)
		return d.set
	}
	var body ast.Node
	for i, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			ps.decodeErr("", "document %d: only one YAML document is allowed", i+1)
			return d.set
		}
		body = doc.Body
	}
	d.collectAnchors(body, 0)
	d.decode("", body, reflect.ValueOf(out).Elem())
	return d.set
}

// syntaxError records a YAML parse error at "<name>:line:column".
func (d *decoder) syntaxError(err error) {
	var yerr yaml.Error
	if errors.As(err, &yerr) {
		if tk := yerr.GetToken(); tk != nil && tk.Position != nil {
			d.ps.list = append(d.ps.list, Problem{
				Path:    fmt.Sprintf("%s:%d:%d", d.ps.name, tk.Position.Line, tk.Position.Column),
				Message: "invalid YAML: " + yerr.GetMessage(),
			})
			d.ps.bad[""] = true
			return
		}
	}
	d.ps.decodeErr("", "invalid YAML: %v", err)
}

// collectAnchors registers every anchor of the tree by name, in document
// order: an alias names the latest anchor of its name before it (YAML 1.2,
// 3.2.2.2), so a redefined anchor keeps every definition.
func (d *decoder) collectAnchors(n ast.Node, depth int) {
	if n == nil || depth > 1000 {
		return
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		name := v.Name.GetToken().Value
		line, col := tokenPos(v.Start)
		d.anchors[name] = append(d.anchors[name], anchorDef{line: line, col: col, node: v.Value})
		d.collectAnchors(v.Value, depth+1)
	case *ast.TagNode:
		d.collectAnchors(v.Value, depth+1)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.collectAnchors(mv, depth+1)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(v.Key, depth+1)
		d.collectAnchors(v.Value, depth+1)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.collectAnchors(e, depth+1)
		}
	}
}

// anchorBefore returns the node of the latest anchor name that stands
// before the alias token at, and false when there is none.
func (d *decoder) anchorBefore(name string, at *token.Token) (ast.Node, bool) {
	line, col := tokenPos(at)
	defs := d.anchors[name]
	for i := len(defs) - 1; i >= 0; i-- {
		if defs[i].line < line || defs[i].line == line && defs[i].col < col {
			return defs[i].node, true
		}
	}
	return nil, false
}

// tokenPos is where tk stands, line and column (0, 0 when unknown).
func tokenPos(tk *token.Token) (line, col int) {
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// resolve strips anchors and tags off n and follows aliases. It returns the
// node (nil for an absent value), the first tag seen ("" if none) and false
// when an alias is unknown (the problem is recorded).
func (d *decoder) resolve(path string, n ast.Node) (ast.Node, string, bool) {
	tag := ""
	for range maxMergeDepth {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			if tag == "" {
				tag = v.Start.Value
			}
			n = v.Value
		case *ast.AliasNode:
			name := v.Value.GetToken().Value
			target, ok := d.anchorBefore(name, v.Start)
			if !ok {
				if _, later := d.anchors[name]; later {
					d.ps.decodeErr(path, "alias *%s before its anchor &%s", name, name)
				} else {
					d.ps.decodeErr(path, "unknown alias *%s", name)
				}
				return nil, "", false
			}
			n = target
		default:
			return n, tag, true
		}
	}
	d.ps.decodeErr(path, "too many nested aliases")
	return nil, "", false
}

// decode decodes n into v, whose path is path. An absent or null n leaves v
// untouched and path unset.
func (d *decoder) decode(path string, n ast.Node, v reflect.Value) {
	n, tag, ok := d.resolve(path, n)
	if !ok || n == nil || n.Type() == ast.NullType {
		return
	}
	t := v.Type()
	switch {
	case t == durationType:
		d.decodeDuration(path, n, tag, v)
	case t == sqlStatementType:
		d.decodeSQLStatement(path, n, v)
	case t.Kind() == reflect.Struct:
		d.decodeStruct(path, n, v)
	case t.Kind() == reflect.Slice:
		d.decodeSlice(path, n, v)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		d.decodeMap(path, n, v)
	case t.Kind() == reflect.String:
		sc, ok := d.scalar(path, n, tag)
		if !ok {
			d.typeErr(path, sc, "must be a string")
			return
		}
		v.SetString(sc.text)
		d.set[path] = true
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		d.decodeInt(path, n, tag, v)
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		d.decodeUint(path, n, tag, v)
	case t.Kind() == reflect.Bool:
		d.decodeBool(path, n, tag, v)
	case t.Kind() == reflect.Float64:
		d.decodeFloat(path, n, tag, v)
	default:
		d.ps.decodeErr(path, "unsupported field type %s", t)
	}
}

// scalarValue is the text of a scalar node.
type scalarValue struct {
	// text is the expanded value of a string, the source text otherwise.
	text string
	// str is true for a YAML string (plain, quoted, block or !!str).
	str bool
	// env is true when the string held a ${...} reference.
	env bool
	// failed is true when expansion failed (the problem is recorded).
	failed bool
	node   ast.Node
}

// scalar returns the scalar value of n, or false if n is not a scalar or
// its expansion failed.
func (d *decoder) scalar(path string, n ast.Node, tag string) (scalarValue, bool) {
	var sc scalarValue
	switch v := n.(type) {
	case *ast.StringNode:
		sc = scalarValue{text: v.Value, str: true}
	case *ast.LiteralNode:
		sc = scalarValue{text: v.Value.Value, str: true}
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		sc = scalarValue{text: n.GetToken().Value, str: tag == "!!str"}
	default:
		return scalarValue{}, false
	}
	sc.node = n
	if sc.str {
		out, refs, problems := expand(sc.text, d.lookup)
		for _, p := range problems {
			d.ps.decodeErr(path, "%s", p)
		}
		if len(problems) > 0 {
			return scalarValue{failed: true}, false
		}
		sc.text, sc.env = out, refs
	}
	return sc, true
}

// typeErr records msg unless the failure was an expansion problem, already
// recorded.
func (d *decoder) typeErr(path string, sc scalarValue, msg string) {
	if !sc.failed {
		d.ps.decodeErr(path, "%s", msg)
	}
}

// scalarOf returns n's scalar for a field that msg describes ("must be a
// boolean"): native when n is a node of one of types (not tagged !!str),
// otherwise a string that came from an environment reference, its text
// for the caller to parse. Anything else is recorded as msg, and ok is
// false.
func (d *decoder) scalarOf(path string, n ast.Node, tag, msg string, types ...ast.NodeType) (sc scalarValue, native, ok bool) {
	sc, ok = d.scalar(path, n, tag)
	switch {
	case !ok:
		d.typeErr(path, sc, msg)
		return sc, false, false
	case !sc.str && slices.Contains(types, sc.node.Type()):
		return sc, true, true
	case sc.env:
		return sc, false, true
	}
	d.ps.decodeErr(path, "%s", msg)
	return sc, false, false
}

func (d *decoder) decodeDuration(path string, n ast.Node, tag string, v reflect.Value) {
	sc, ok := d.scalar(path, n, tag)
	if !ok {
		d.typeErr(path, sc, `must be a duration (e.g. "5s", "336h")`)
		return
	}
	if !sc.str {
		if in, ok := sc.node.(*ast.IntegerNode); ok && isZero(in) {
			v.SetInt(0)
			d.set[path] = true
			return
		}
		d.ps.decodeErr(path, "invalid duration %q (a unit is required, e.g. %q)", sc.text, sc.text+"s")
		return
	}
	dur, err := time.ParseDuration(sc.text)
	if err != nil {
		d.ps.decodeErr(path, "invalid duration %q", sc.text)
		return
	}
	v.SetInt(int64(dur))
	d.set[path] = true
}

func isZero(n *ast.IntegerNode) bool {
	switch x := n.Value.(type) {
	case int64:
		return x == 0
	case uint64:
		return x == 0
	}
	return false
}

// integer returns the value of an integer node, or of a string that came
// from an environment reference.
func (d *decoder) integer(path string, n ast.Node, tag string) (i int64, u uint64, neg bool, ok bool) {
	sc, native, isScalar := d.scalarOf(path, n, tag, "must be an integer", ast.IntegerType)
	if !isScalar {
		return 0, 0, false, false
	}
	if native {
		switch x := sc.node.(*ast.IntegerNode).Value.(type) {
		case int64:
			return x, uint64(x), x < 0, true
		case uint64:
			if x > math.MaxInt64 {
				return math.MaxInt64, x, false, true
			}
			return int64(x), x, false, true
		}
		d.ps.decodeErr(path, "must be an integer")
		return 0, 0, false, false
	}
	text := strings.TrimSpace(sc.text)
	if x, err := strconv.ParseInt(text, 10, 64); err == nil {
		return x, uint64(x), x < 0, true
	}
	if x, err := strconv.ParseUint(text, 10, 64); err == nil {
		return math.MaxInt64, x, false, true
	}
	d.ps.decodeErr(path, "must be an integer (got %q)", sc.text)
	return 0, 0, false, false
}

func (d *decoder) decodeInt(path string, n ast.Node, tag string, v reflect.Value) {
	i, u, neg, ok := d.integer(path, n, tag)
	if !ok {
		return
	}
	if (!neg && u > math.MaxInt64) || v.OverflowInt(i) {
		d.ps.decodeErr(path, "integer out of range")
		return
	}
	v.SetInt(i)
	d.set[path] = true
}

func (d *decoder) decodeUint(path string, n ast.Node, tag string, v reflect.Value) {
	_, u, neg, ok := d.integer(path, n, tag)
	if !ok {
		return
	}
	if neg || v.OverflowUint(u) {
		d.ps.decodeErr(path, "integer out of range")
		return
	}
	v.SetUint(u)
	d.set[path] = true
}

func (d *decoder) decodeBool(path string, n ast.Node, tag string, v reflect.Value) {
	sc, native, ok := d.scalarOf(path, n, tag, "must be a boolean", ast.BoolType)
	if !ok {
		return
	}
	var b bool
	if native {
		b = sc.node.(*ast.BoolNode).Value
	} else {
		x, err := strconv.ParseBool(strings.TrimSpace(sc.text))
		if err != nil {
			d.ps.decodeErr(path, "must be a boolean (got %q)", sc.text)
			return
		}
		b = x
	}
	v.SetBool(b)
	d.set[path] = true
}

func (d *decoder) decodeSlice(path string, n ast.Node, v reflect.Value) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.ps.decodeErr(path, "must be a list")
		return
	}
	d.set[path] = true
	s := reflect.MakeSlice(v.Type(), len(seq.Values), len(seq.Values))
	for i, e := range seq.Values {
		d.decode(fmt.Sprintf("%s[%d]", path, i), e, s.Index(i))
	}
	v.Set(s)
}

// decodeMap decodes a mapping into a map keyed by strings; each value's
// path is path.key. The parser already refuses a key given twice.
func (d *decoder) decodeMap(path string, n ast.Node, v reflect.Value) {
	entries, ok := d.mapping(path, n)
	if !ok {
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(entries))
	for _, e := range entries {
		ev := reflect.New(v.Type().Elem()).Elem()
		d.decode(joinPath(path, e.key), e.value, ev)
		m.SetMapIndex(reflect.ValueOf(e.key).Convert(v.Type().Key()), ev)
	}
	v.Set(m)
}

func (d *decoder) decodeStruct(path string, n ast.Node, v reflect.Value) {
	entries, ok := d.mapping(path, n)
	if !ok {
		return
	}
	fields := structFields(v.Type())
	for _, e := range entries {
		p := joinPath(path, e.key)
		idx, known := fields[e.key]
		if !known {
			d.ps.decodeErr(p, "unknown key")
			continue
		}
		d.decode(p, e.value, v.Field(idx))
	}
}

// structFields maps yaml keys to field indexes: the yaml tag's name, or the
// lowercased field name; "-" skips a field.
func structFields(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		fields[name] = i
	}
	return fields
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapEntry is one key of a mapping, merge keys resolved.
type mapEntry struct {
	key   string
	value ast.Node
}

// mapping returns the entries of the mapping n at path (see mapEntries)
// and marks path set; false, with the problem recorded, if n is not a
// mapping. It reads the mapping a map or a struct field is decoded from.
func (d *decoder) mapping(path string, n ast.Node) ([]mapEntry, bool) {
	entries, ok := d.mapEntries(path, n, map[ast.Node]bool{})
	if ok {
		d.set[path] = true
	}
	return entries, ok
}

// mapEntries returns the entries of the mapping n in document order, with
// the entries of merge keys (<<) added where they are not overridden by an
// explicit key. It reports false, with the problem recorded, if n is not a
// mapping. chain holds the mappings being merged into, to stop cycles.
func (d *decoder) mapEntries(path string, n ast.Node, chain map[ast.Node]bool) ([]mapEntry, bool) {
	var values []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	default:
		d.ps.decodeErr(path, "must be a mapping")
		return nil, false
	}
	switch {
	case chain[n]:
		d.ps.decodeErr(path, "recursive merge key")
		return nil, false
	case len(chain) > maxMergeDepth:
		d.ps.decodeErr(path, "too many nested merge keys")
		return nil, false
	}
	chain[n] = true
	defer delete(chain, n)

	var explicit []mapEntry
	var merged []mapEntry
	for _, mv := range values {
		if mv.Key.IsMergeKey() {
			merged = append(merged, d.mergeEntries(path, mv.Value, chain)...)
			continue
		}
		key, ok := d.keyText(path, mv.Key)
		if !ok {
			continue
		}
		explicit = append(explicit, mapEntry{key: key, value: mv.Value})
	}
	if len(merged) == 0 {
		return explicit, true
	}
	seen := make(map[string]bool, len(explicit)+len(merged))
	for _, e := range explicit {
		seen[e.key] = true
	}
	entries := explicit
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			entries = append(entries, e)
		}
	}
	return entries, true
}

// mergeEntries returns the entries a merge key's value brings: one mapping
// or a list of mappings (earlier ones win).
func (d *decoder) mergeEntries(path string, value ast.Node, chain map[ast.Node]bool) []mapEntry {
	mpath := joinPath(path, "<<")
	n, _, ok := d.resolve(mpath, value)
	if !ok || n == nil {
		return nil
	}
	if seq, isSeq := n.(*ast.SequenceNode); isSeq {
		var out []mapEntry
		for i, e := range seq.Values {
			epath := fmt.Sprintf("%s[%d]", mpath, i)
			en, _, ok := d.resolve(epath, e)
			if !ok || en == nil {
				continue
			}
			entries, ok := d.mapEntries(epath, en, chain)
			if ok {
				out = append(out, entries...)
			}
		}
		return out
	}
	entries, _ := d.mapEntries(mpath, n, chain)
	return entries
}

// keyText returns the text of a mapping key.
func (d *decoder) keyText(path string, k ast.MapKeyNode) (string, bool) {
	n, _, ok := d.resolve(path, k)
	if !ok {
		return "", false
	}
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case ast.ScalarNode:
		return n.GetToken().Value, true
	}
	d.ps.decodeErr(joinPath(path, k.String()), "unknown key (complex keys are not supported)")
	return "", false
}
