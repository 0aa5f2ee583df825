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
	sc, native, ok := d.scalarOf(path, n, tag, "must be a number", ast.FloatType, ast.IntegerType)
	if !ok {
		return
	}
	text := strings.TrimSpace(sc.text)
	if native {
		text = sc.node.GetToken().Value
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(text, "_", ""), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || v.OverflowFloat(f) {
		d.ps.decodeErr(path, "must be a finite number (got %q)", text)
		return
	}
	v.SetFloat(f)
	d.set[path] = true
}
