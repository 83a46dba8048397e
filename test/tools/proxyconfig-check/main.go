// proxyconfig-check reads pod template annotations as gracekeeper's
// ProxyExitsEarly finding prints them ("KEY: 'VALUE'" or `KEY: "VALUE"`, one
// per line on stdin) and decodes each as its mesh does:
//
//   - proxy.istio.io/config: Istio's ProxyConfig (istio.io/api, the version
//     in go.mod), strictly: an unknown field or a malformed duration fails.
//     Its proxyMetadata EXIT_ON_ZERO_ACTIVE_CONNECTIONS and
//     MINIMUM_DRAIN_DURATION are read as the Istio agent reads its
//     environment (strconv.ParseBool, time.ParseDuration).
//   - config.alpha.linkerd.io/proxy-wait-before-exit-seconds: an unsigned
//     integer, as Linkerd's injector reads it (strconv.ParseUint).
//
// It prints what each line decodes to and exits 1 at the first line that
// does not decode, naming it.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	meshconfig "istio.io/api/mesh/v1alpha1"
)

const (
	istioConfig   = "proxy.istio.io/config"
	linkerdWait   = "config.alpha.linkerd.io/proxy-wait-before-exit-seconds"
	exitOnZero    = "EXIT_ON_ZERO_ACTIVE_CONNECTIONS"
	minimumDrain  = "MINIMUM_DRAIN_DURATION"
	maxLineLength = 64 * 1024
)

// unquote reads a YAML flow scalar of one line: single-quoted (” is a
// quote), double-quoted (Go escapes, which cover what gracekeeper writes),
// or plain.
func unquote(text string) (string, error) {
	switch {
	case len(text) >= 2 && text[0] == '\'' && text[len(text)-1] == '\'':
		return strings.ReplaceAll(text[1:len(text)-1], "''", "'"), nil
	case len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"':
		return strconv.Unquote(text)
	default:
		return text, nil
	}
}

func checkIstio(value string) (string, error) {
	var config meshconfig.ProxyConfig
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal([]byte(value), &config); err != nil {
		return "", fmt.Errorf("not a ProxyConfig: %w", err)
	}
	out := []string{}
	if d := config.GetTerminationDrainDuration(); d != nil {
		out = append(out, "terminationDrainDuration="+d.AsDuration().String())
	}
	if v, ok := config.GetProxyMetadata()[exitOnZero]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return "", fmt.Errorf("proxyMetadata.%s: %w", exitOnZero, err)
		}
		out = append(out, fmt.Sprintf("%s=%t", exitOnZero, b))
	}
	if v, ok := config.GetProxyMetadata()[minimumDrain]; ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", fmt.Errorf("proxyMetadata.%s: %w", minimumDrain, err)
		}
		out = append(out, fmt.Sprintf("%s=%s", minimumDrain, d))
	}
	return strings.Join(out, " "), nil
}

func checkLinkerd(value string) (string, error) {
	seconds, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("waitBeforeExitSeconds=%d", seconds), nil
}

func check(line string) (string, error) {
	key, raw, found := strings.Cut(line, ": ")
	if !found {
		return "", fmt.Errorf("expected KEY: VALUE")
	}
	value, err := unquote(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("%s: the value does not unquote: %w", key, err)
	}
	var decoded string
	switch key {
	case istioConfig:
		decoded, err = checkIstio(value)
	case linkerdWait:
		decoded, err = checkLinkerd(value)
	default:
		return "", fmt.Errorf("%s: not an annotation this checker knows", key)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return key + ": " + decoded, nil
}

func main() {
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 4096), maxLineLength)
	lines := 0
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		lines++
		decoded, err := check(line)
		if err != nil {
			fmt.Fprintf(os.Stderr, "line %d: %v\n", lines, err)
			os.Exit(1)
		}
		fmt.Println(decoded)
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "reading stdin: %v\n", err)
		os.Exit(1)
	}
	if lines == 0 {
		fmt.Fprintln(os.Stderr, "no annotation on stdin")
		os.Exit(1)
	}
}
