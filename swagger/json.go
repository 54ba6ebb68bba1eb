package swagger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxDepth bounds the nesting of a JSON document; no API description comes
// near it.
const maxDepth = 1000

// parseJSON reads a JSON document into a yaml.v3 node tree, keeping the
// order of object members. encoding/json reads it, not the YAML parser, so
// that any valid JSON is accepted (tabs, escapes, big numbers).
func parseJSON(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := readJSON(dec, 0)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			return n, nil
		}
		if err == nil {
			err = errors.New("data after the top-level value")
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("swagger: invalid JSON: %w", err)
}

func readJSON(dec *json.Decoder, depth int) (*yaml.Node, error) {
	if depth > maxDepth {
		return nil, errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, str(k.(string))) // the decoder allows only string keys
			}
			v, err := readJSON(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return str(t), nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(string(t), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		return boolean(t), nil
	default: // nil
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
}

// jsonWriter writes a node tree as JSON the way json.MarshalIndent does
// (which is how swag writes swagger.json), or compact if indent is empty.
type jsonWriter struct {
	buf        bytes.Buffer
	indent     string
	escapeHTML bool
}

// writeJSON writes n as JSON in the layout of the original document: its
// indentation (none if it was on one line), its final newline, and HTML
// escaping of strings unless it held a raw '<', '>' or '&'.
func writeJSON(n *yaml.Node, original []byte) ([]byte, error) {
	w := &jsonWriter{indent: jsonIndent(original), escapeHTML: !bytes.ContainsAny(original, "<>&")}
	if err := w.value(n, 0); err != nil {
		return nil, err
	}
	if bytes.HasSuffix(original, []byte("\n")) {
		w.buf.WriteByte('\n')
	}
	return w.buf.Bytes(), nil
}

// jsonIndent returns the indentation of the first indented line of a JSON
// document, "" if it is all on one line, or four spaces by default.
func jsonIndent(doc []byte) string {
	doc = bytes.TrimSpace(doc)
	if !bytes.Contains(doc, []byte("\n")) {
		return ""
	}
	for _, line := range bytes.Split(doc, []byte("\n"))[1:] {
		if ws := len(line) - len(bytes.TrimLeft(line, " \t")); ws > 0 && ws < len(line) {
			return string(line[:ws])
		}
	}
	return "    "
}

func (w *jsonWriter) newline(depth int) {
	if w.indent == "" {
		return
	}
	w.buf.WriteByte('\n')
	for range depth {
		w.buf.WriteString(w.indent)
	}
}

func (w *jsonWriter) value(n *yaml.Node, depth int) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return errors.New("swagger: empty document")
		}
		return w.value(n.Content[0], depth)
	case yaml.MappingNode, yaml.SequenceNode:
		open, end, step := byte('['), byte(']'), 1
		if n.Kind == yaml.MappingNode {
			open, end, step = '{', '}', 2
		}
		w.buf.WriteByte(open)
		for i := 0; i+step <= len(n.Content); i += step {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			w.newline(depth + 1)
			if step == 2 {
				w.str(n.Content[i].Value)
				w.buf.WriteByte(':')
				if w.indent != "" {
					w.buf.WriteByte(' ')
				}
			}
			if err := w.value(n.Content[i+step-1], depth+1); err != nil {
				return err
			}
		}
		if len(n.Content) > 0 {
			w.newline(depth)
		}
		w.buf.WriteByte(end)
		return nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			w.str(n.Value)
			return nil
		case "!!int", "!!float":
			var x json.Number
			if json.Unmarshal([]byte(n.Value), &x) != nil {
				return fmt.Errorf("swagger: %q is not a JSON number", n.Value)
			}
			w.buf.WriteString(n.Value)
			return nil
		case "!!bool", "!!null":
			w.buf.WriteString(n.Value)
			return nil
		}
	}
	return fmt.Errorf("swagger: cannot write %s as JSON", n.ShortTag())
}

func (w *jsonWriter) str(s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(w.escapeHTML)
	enc.Encode(s) //nolint:errcheck // encoding a string cannot fail
	w.buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}
