"""End-to-end tests of structured output through `kvserve serve` with the embedded model: every
schema of tests/data/structured/schemas.json, sampled greedily and with two seeds, gives output
that an independent validator (the `jsonschema` package) accepts whenever it finishes with
"stop"; regexes and choices hold the same way (checked with Python's `re`); every schema of
bad_schemas.json is a 400 naming response_format, and the server stays up after them.

Exits 77 (skip) when `jsonschema` cannot be imported (Debian: python3-jsonschema)."""
import argparse
import concurrent.futures
import datetime
import ipaddress
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

try:
    import jsonschema
    import jsonschema.validators
except ImportError:
    jsonschema = None

KVSERVE = None
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "structured")
WORKERS = 8
MAX_TOKENS = 512
# One greedy sample and two seeded ones per schema, regex and choice list.
SAMPLINGS = [{"temperature": 0}, {"temperature": 1.0, "seed": 11}, {"temperature": 1.0, "seed": 29}]
# The least share of schema samples that must end with "stop" rather than "length". The embedded
# model is a small story model that knows nothing of JSON, so some samples run on inside a string
# or an open object until max_tokens: 405 of the 432 (93.8%) finished when this floor was set,
# the same on every run (greedy and seeded samples repeat).
MIN_FINISHED_SHARE = 0.8


def load(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


# --- Formats -------------------------------------------------------------------------------------
# jsonschema's own format checker is used, but how much it checks depends on optional packages:
# without rfc3339-validator it does not check "date-time" and "time" at all, and its "email" only
# looks for an "@". So the formats kvserve generates are also checked here, strictly, by these
# functions (RFC 3339 for date/time/date-time, RFC 4122 text for uuid, a dot-atom@domain address
# for email, dotted-quad without leading zeros for ipv4, the ranges of int32/int64). A format
# applies to its own type only: other values pass.

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})*")
_IPV4 = re.compile(r"(?:0|[1-9]\d{0,2})(?:\.(?:0|[1-9]\d{0,2})){3}", re.ASCII)


def strict_date(s):
    m = _DATE.fullmatch(s)
    if not m:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def strict_time(s):
    m = _TIME.fullmatch(s)
    if not m:
        return False
    hour, minute, second = int(m[1]), int(m[2]), int(m[3])
    if hour > 23 or minute > 59 or second > 60:  # 60: RFC 3339 allows a leap second
        return False
    return m[6] is None or (int(m[6]) <= 23 and int(m[7]) <= 59)


def strict_date_time(s):
    parts = re.split(r"[Tt]", s)
    return len(parts) == 2 and strict_date(parts[0]) and strict_time(parts[1])


def strict_email(s):
    local, _, domain = s.rpartition("@")
    return bool(_EMAIL.fullmatch(s)) and len(local) <= 64 and len(domain) <= 253


def strict_ipv4(s):
    if not _IPV4.fullmatch(s):
        return False
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


def int_range(bits):
    def check(n):
        return isinstance(n, int) and -(2 ** (bits - 1)) <= n < 2 ** (bits - 1)
    return check


STRICT_FORMATS = {
    str: {"date": strict_date, "time": strict_time, "date-time": strict_date_time,
          "uuid": lambda s: bool(_UUID.fullmatch(s)), "email": strict_email, "ipv4": strict_ipv4},
    (int, float): {"int32": int_range(32), "int64": int_range(64)},
}


def make_format_checker(base):
    """A FormatChecker that passes a value only when both `base` (jsonschema's checker for the
    schema's draft) and the strict checks above accept it."""
    checker = jsonschema.FormatChecker(formats=())
    names = set(base.checkers)
    for checks in STRICT_FORMATS.values():
        names |= set(checks)
    for name in names:
        def check(instance, name=name):
            if name in base.checkers and not base.conforms(instance, name):
                return False
            for types, checks in STRICT_FORMATS.items():
                if name in checks and isinstance(instance, types) \
                        and not isinstance(instance, bool):
                    return checks[name](instance)
            return True
        checker.checks(name)(check)
    return checker


# --- Schemas -------------------------------------------------------------------------------------

def translate_nullable(schema):
    """OpenAPI 3.0's `nullable: true`, which kvserve honours and JSON Schema does not know, as
    JSON Schema: "null" added to the type (and null to an enum beside it), or, without a type, an
    anyOf with {"type": "null"}. Walks only the places that hold subschemas, so a property that
    happens to be called "nullable" is left alone."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"):
        if isinstance(out.get(key), dict):
            out[key] = {k: translate_nullable(v) for k, v in out[key].items()}
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains",
                "propertyNames", "unevaluatedItems", "unevaluatedProperties"):
        if key in out:
            out[key] = translate_nullable(out[key])
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            out[key] = [translate_nullable(s) for s in out[key]]
    if out.pop("nullable", False) is not True:
        return out
    if "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = types if "null" in types else types + ["null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = out["enum"] + [None]
        return out
    rest = {k: v for k, v in out.items() if k not in ("$defs", "definitions")}
    wrapped = {k: v for k, v in out.items() if k in ("$defs", "definitions")}
    wrapped["anyOf"] = [rest, {"type": "null"}]
    return wrapped


def validator_for(schema):
    schema = translate_nullable(schema)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    base = getattr(cls, "FORMAT_CHECKER", None) or jsonschema.FormatChecker()
    return cls(schema, format_checker=make_format_checker(base))


def no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate keys: %r" % sorted({k for k in keys if keys.count(k) > 1}))
    return dict(pairs)


# --- The server ----------------------------------------------------------------------------------

class Server:
    def __init__(self):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([KVSERVE, "serve", "--port", "0", "--threads", "2",
                                      "--log-level", "warning"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"kvserve: listening on (http://\S+)", line)
        if not m:
            self.stop()
            raise AssertionError("kvserve serve did not start: %r\n%s" % (line, self.stderr()))
        self.url = m.group(1)

    def stderr(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def post(self, path, body, timeout=120):
        """(HTTP status, parsed JSON body)."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc.stdout.close()
        return self.proc.returncode


def chat(content, extra):
    return {"messages": [{"role": "user", "content": content}], "max_tokens": MAX_TOKENS, **extra}


class SchemaSuiteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.pool = concurrent.futures.ThreadPoolExecutor(WORKERS)

    @classmethod
    def tearDownClass(cls):
        cls.pool.shutdown()
        rc = cls.server.stop()
        # SIGTERM is a graceful shutdown; a crash before it would show as a signal or an error.
        assert rc == 0, "kvserve serve exited with %s:\n%s" % (rc, cls.server.stderr())

    def run_all(self, requests):
        """requests: [(label, path, body)] → [(label, body, status, response)], in order."""
        def one(item):
            label, path, body = item
            status, response = self.server.post(path, body)
            return label, body, status, response
        return list(self.pool.map(one, requests))

    def assert_ok(self, label, body, status, response):
        self.assertEqual(status, 200, "%s: %s\nrequest: %s" % (label, response, json.dumps(body)))
        self.assertIsNone(self.server.proc.poll(), "the server exited:\n" + self.server.stderr())

    def test_the_validator_is_not_vacuous(self):
        """The checks the suite relies on reject what they should, whatever optional packages
        jsonschema has: formats, OpenAPI nullable, int32/int64."""
        schemas = {e["name"]: e["schema"] for e in load("schemas.json")}
        cases = {
            "str_date": (["2024-02-29", "0001-01-01"],
                         ["2023-02-29", "2024-13-01", "20240101", "2024-1-01", 5]),
            "str_time": (["23:59:59Z", "00:00:00.5+05:30", "12:00:00-23:59"],
                         ["24:00:00Z", "12:00:00", "12:60:00Z", "12:00:00+24:00", "1:00:00Z"]),
            "str_date_time": (["2024-02-29T23:59:59Z", "2020-01-01T00:00:00.123456-08:00"],
                              ["2023-02-29T00:00:00Z", "2024-01-01 00:00:00Z",
                               "2024-01-01T00:00:00", "2024-01-01T25:00:00Z", "garbage"]),
            "str_uuid": (["123e4567-e89b-12d3-a456-426614174000"],
                         ["123e4567e89b12d3a456426614174000",
                          "123e4567-e89b-12d3-a456-42661417400g", "x"]),
            "str_email": (["a.b+c@example.com", "x@y"],
                          ["no-at-sign", "a@", "@b.com", "a..b@c.com", "a b@c.com", "a@-b.com"]),
            "str_ipv4": (["0.0.0.0", "255.255.255.255"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
            "int_openapi_int32": ([0, -2 ** 31, 2 ** 31 - 1], [2 ** 31, -2 ** 31 - 1, 1.5]),
            "int_openapi_int64_min": ([0, 2 ** 63 - 1], [2 ** 63, -1]),
            "tiny_nullable_openapi_string": ([None, "abc"], ["abcdefg", 5]),
            "openapi_user_nullable": ([{"id": "123e4567-e89b-12d3-a456-426614174000",
                                        "nickname": None, "birthday": None}],
                                      [{"id": None}, {"id": "x"},
                                       {"id": "123e4567-e89b-12d3-a456-426614174000",
                                        "birthday": "2023-02-29"}]),
        }
        for name, (good, bad) in cases.items():
            v = validator_for(schemas[name])
            for value in good:
                self.assertTrue(v.is_valid(value), (name, value, list(v.iter_errors(value))))
            for value in bad:
                self.assertFalse(v.is_valid(value), (name, value))

    def test_schema_suite_outputs_validate(self):
        suite = load("schemas.json")
        self.assertGreater(len(suite), 100)
        validators = {e["name"]: validator_for(e["schema"]) for e in suite}
        requests = []
        for e in suite:
            rf = {"type": "json_schema", "json_schema": {"name": e["name"], "schema": e["schema"]}}
            for sampling in SAMPLINGS:
                requests.append((e["name"], "/v1/chat/completions",
                                 chat("Answer in JSON.", {"response_format": rf, **sampling})))
        start = time.monotonic()
        results = self.run_all(requests)
        elapsed = time.monotonic() - start
        finished, invalid, duplicates = 0, [], []
        for name, body, status, response in results:
            self.assert_ok(name, body, status, response)
            for choice in response["choices"]:
                self.assertIn(choice["finish_reason"], ("stop", "length"))
                if choice["finish_reason"] != "stop":
                    continue
                finished += 1
                text = choice["message"]["content"]
                try:
                    value = json.loads(text)
                    validators[name].validate(value)
                except (ValueError, jsonschema.ValidationError) as err:
                    invalid.append("schema %s: %s\n  sampling: %s\n  output: %r\n  error: %s" % (
                        name, json.dumps(body["response_format"]["json_schema"]["schema"]),
                        {k: body[k] for k in ("temperature", "seed") if k in body}, text,
                        str(err).splitlines()[0]))
                    continue
                try:
                    json.loads(text, object_pairs_hook=no_duplicate_keys)
                except ValueError as err:
                    duplicates.append("%s: %s: %r" % (name, err, text[:300]))
        n = len(results)
        print("\nschema suite: %d schemas, %d requests, %d finished (%.1f%%), %d invalid, %.1f s"
              % (len(suite), n, finished, 100.0 * finished / n, len(invalid), elapsed))
        if duplicates:
            # Valid against every schema here (json.loads keeps the last value), but worth seeing:
            # extra members under additionalProperties may repeat a key.
            print("note: %d finished outputs repeat an object key, e.g. %s"
                  % (len(duplicates), duplicates[0]))
        self.assertEqual(invalid, [], "%d of %d finished outputs are invalid:\n%s"
                         % (len(invalid), finished, "\n".join(invalid)))
        print("schema suite: %d requests, %d finished (%.1f%%), all valid"
              % (n, finished, 100.0 * finished / n))
        self.assertGreaterEqual(finished / n, MIN_FINISHED_SHARE)

    REGEXES = [
        r"\d{1,6}",
        r"\d{4}-\d{2}-\d{2}",
        r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
        r"[a-z0-9._%+-]{1,20}@[a-z0-9-]{1,15}\.(com|org|net)",
        r"(yes|no|maybe)",
        r"[A-Z]{2,5}",
        r"\w{3,8}( \w{3,8}){0,3}",
        r"-?\d{1,3}\.\d{2}",
        r"#[0-9a-fA-F]{6}",
        r"\(\d{3}\) \d{3}-\d{4}",
        r"^(true|false)$",
        r"\A[A-Z][a-z]{2,9}( [A-Z][a-z]{2,9})?\Z",
        r"v\d+\.\d+\.\d+(-(alpha|beta|rc)\.\d)?",
        r"[a-z]+(-[a-z]+){0,4}",
        r"\$\d{1,4}(\.\d\d)?",
        r"(ab|cd){2,4}x?",
        r"(?P<h>[01]\d|2[0-3]):(?:[0-5]\d)",
        r"\d{1,2}/\d{1,2}/\d{4}|\d{4}\.\d\d\.\d\d",
        r"\S{5}",
        r"[^\s,]{1,10}(,[^\s,]{1,10}){1,3}",
        r"\{\"k\": \d\}\[\]\.\*\+\?\|",
        r"\x41[\u00e9\u00e8]{1,3}\t?z",
        r"a{,3}b{2,4}c?",
        r"[.\-_]{1,3}[^a-z\d\s]{2}",
        r"(?:[0-9]{3}[- ]?){2}[0-9]{4}",
        r"(?#a comment)(red|green|blue)( (red|green|blue)){0,2}",
    ]

    def test_regex_outputs_match(self):
        requests = []
        for r in self.REGEXES:
            for sampling in SAMPLINGS:
                requests.append((r, "/v1/chat/completions",
                                 chat("Say something.", {"structured_outputs": {"regex": r},
                                                         "max_tokens": 128, **sampling})))
            requests.append((r, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 128,
                                                    "structured_outputs": {"regex": r}, "seed": 5}))
        finished, bad = 0, []
        for r, body, status, response in self.run_all(requests):
            self.assert_ok(r, body, status, response)
            for choice in response["choices"]:
                if choice["finish_reason"] != "stop":
                    continue
                finished += 1
                text = choice["text"] if "text" in choice else choice["message"]["content"]
                # kvserve's \d \w \s are ASCII (regex.h), as with re.ASCII: without the flag
                # Python's \S, \W, \D and [^\s] would match less than kvserve's.
                if not re.fullmatch(r, text, re.ASCII):
                    bad.append("regex %r: output %r (request %s)" % (r, text, json.dumps(body)))
        print("\nregexes: %d regexes, %d requests, %d finished" % (len(self.REGEXES), len(requests),
                                                                    finished))
        self.assertEqual(bad, [], "\n".join(bad))
        self.assertGreaterEqual(finished, 0.8 * len(requests))  # 102 of 104 when this was written

    CHOICES = [
        ["red", "green", "blue"],
        ["yes", "no"],
        ["positive", "negative", "neutral"],
        ["a", "ab", "abc"],
        ["café", "naïve", "日本"],
        ['say "hi"', "back\\slash", "two\nlines", "tab\there"],
        ["Once upon a time", "Once", "The end."],
        ["only one"],
    ]

    def test_choice_outputs_are_one_of_the_choices(self):
        requests = []
        for choices in self.CHOICES:
            for sampling in SAMPLINGS:
                requests.append((choices, "/v1/chat/completions",
                                 chat("Pick one.", {"structured_outputs": {"choice": choices},
                                                    **sampling})))
            requests.append((choices, "/v1/completions",
                             {"prompt": "The colour is", "max_tokens": 64, "temperature": 0,
                              "structured_outputs": {"choice": choices}}))
        for choices, body, status, response in self.run_all(requests):
            self.assert_ok(choices, body, status, response)
            for choice in response["choices"]:
                text = choice["text"] if "text" in choice else choice["message"]["content"]
                # Every choice is far shorter than max_tokens, so every sample finishes.
                self.assertEqual(choice["finish_reason"], "stop", (choices, text))
                self.assertIn(text, choices)

    def test_bad_schemas_are_400s_naming_response_format(self):
        bad = load("bad_schemas.json")
        self.assertGreater(len(bad), 10)
        requests = [(e["name"], "/v1/chat/completions",
                     chat("x", {"max_tokens": 8, "response_format": {
                         "type": "json_schema",
                         "json_schema": {"name": e["name"], "schema": e["schema"]}}}))
                    for e in bad]
        for name, body, status, response in self.run_all(requests):
            self.assertEqual(status, 400, "%s: %s" % (name, response))
            error = response["error"]
            self.assertEqual(error["type"], "invalid_request_error", (name, error))
            self.assertIsInstance(error["param"], str, (name, error))
            self.assertTrue(error["param"].startswith("response_format"), (name, error))
            self.assertTrue(error["message"], (name, error))
        self.assertIsNone(self.server.proc.poll(), "the server exited:\n" + self.server.stderr())
        # Still serving: a good constrained request succeeds.
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                  "additionalProperties": False}
        body = chat("x", {"temperature": 0, "response_format": {
            "type": "json_schema", "json_schema": {"name": "ok", "schema": schema}}})
        status, response = self.server.post("/v1/chat/completions", body)
        self.assert_ok("good request after the bad ones", body, status, response)
        choice = response["choices"][0]
        if choice["finish_reason"] == "stop":
            value = json.loads(choice["message"]["content"])
            self.assertEqual(list(value), ["n"])
            self.assertIsInstance(value["n"], int)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    if jsonschema is None:
        print("skipped: the jsonschema package is not installed (Debian: python3-jsonschema)")
        sys.exit(77)
    KVSERVE = os.path.abspath(args.kvserve)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
