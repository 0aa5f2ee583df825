package config

import (
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// decodeFloat decodes a number (integer or float node, or a string that
// came from an environment reference) into a float field.
func (d *decoder) decodeFloat(path string, n ast.Node, tag string, v reflect.Value) {
	sc, ok := d.scalar(path, n, tag)
	if !ok {
		d.typeErr(path, sc, "must be a number")
		return
	}
	var text string
	switch {
	case !sc.str && (sc.node.Type() == ast.FloatType || sc.node.Type() == ast.IntegerType):
		text = sc.node.GetToken().Value
	case sc.env:
		text = strings.TrimSpace(sc.text)
	default:
		d.ps.decodeErr(path, "must be a number")
		return
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(text, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || v.OverflowFloat(f) {
		d.ps.decodeErr(path, "must be a finite number (got %q)", text)
		return
	}
	v.SetFloat(f)
	d.set[path] = true
}
