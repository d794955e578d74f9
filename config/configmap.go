package config

import (
	"reflect"
	"sort"
	"strings"
)

// ConfigKeys returns the config values a model file may read, by their HF
// config.json names, plus "gating" and, in each rope_parameters entry, the
// resolved "attention_scaling" (YaRN's cos/sin multiplier, 1 for default).
// Lists are []any, records map[string]any.
func (c *Config) ConfigKeys() map[string]any {
	out := map[string]any{}
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := jsonName(t.Field(i))
		if name == "" {
			continue
		}
		out[name] = plain(v.Field(i))
	}
	out["gating"] = c.Gating
	ropes := map[string]any{}
	for k, r := range c.RopeParameters {
		m := map[string]any{}
		rv := reflect.ValueOf(r)
		for i := 0; i < rv.NumField(); i++ {
			if n := jsonName(rv.Type().Field(i)); n != "" {
				m[n] = plain(rv.Field(i))
			}
		}
		m["attention_scaling"] = r.YarnAttentionFactor()
		ropes[k] = m
	}
	out["rope_parameters"] = ropes
	return out
}

// ConfigKeyNames lists the keys of ConfigKeys, sorted.
func ConfigKeyNames() []string {
	m := (&Config{}).ConfigKeys()
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	return name
}

func plain(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return int(v.Int())
	case reflect.Float64, reflect.Float32:
		return v.Float()
	case reflect.Bool:
		return v.Bool()
	case reflect.String:
		return v.String()
	case reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = plain(v.Index(i))
		}
		return out
	}
	return nil
}
