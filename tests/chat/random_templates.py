"""Seeded random templates for the chat-template parity test (test_template_parity.py).

random_templates: text with spaces, tabs and newlines around tags carrying every whitespace-control
sign (jinja2's trim_blocks, lstrip_blocks, -, +, raw), nested if/for/set/comments.
random_expressions: expressions over literals, the EXPR_CONTEXT variables, an undefined name,
operators, filters, tests and str/dict methods, nested three deep.
"""
import random


def random_templates(n, seed):
    """Small templates built at random from text with spaces, tabs and newlines, and tags with every
    whitespace-control sign: jinja2's trim_blocks/lstrip_blocks/-/+ rules, exercised beyond what the
    committed templates happen to contain."""
    rng = random.Random(seed)
    texts = ["", " ", "  ", "\t", "\n", "\n\n", " \n", "\n  ", "\n\t ", "x", "y z", "a\n b", "\n    w\n"]

    def sign():
        return rng.choice(["", "", "-", "+"])

    def esign():
        return rng.choice(["", "", "-"])

    def block(depth):
        out = []
        for _ in range(rng.randint(1, 4)):
            out.append(rng.choice(texts))
            r = rng.random()
            if r < 0.2:
                out.append("{{" + esign() + " 'v' " + esign() + "}}")
            elif r < 0.35:
                out.append("{#" + esign() + " c " + esign() + "#}")
            elif r < 0.45:
                out.append("{%" + sign() + " set q = 1 " + esign() + "%}")
            elif depth < 2 and r < 0.75:
                kind = rng.choice(["if", "for"])
                head = "if flag" if kind == "if" else "for i in [1, 2]"
                out.append("{%" + sign() + " " + head + " " + esign() + "%}")
                out.append(block(depth + 1))
                if kind == "if" and rng.random() < 0.5:
                    out.append("{%" + sign() + " else " + esign() + "%}")
                    out.append(block(depth + 1))
                out.append(rng.choice(texts))
                out.append("{%" + sign() + " end" + kind + " " + esign() + "%}")
            elif r < 0.8:
                out.append("{%" + sign() + " raw " + esign() + "%}" + rng.choice(texts) + "{{ x }}" +
                           rng.choice(texts) + "{%" + sign() + " endraw " + esign() + "%}")
        out.append(rng.choice(texts))
        return "".join(out)

    return [block(0) + rng.choice(["", "\n", "\n\n", "\r\n"]) for _ in range(n)]


# Atoms, operators, filters, tests and methods of the random expressions.
ATOMS = ["0", "1", "-3", "2.5", "1e3", "0.1", "'ab'", "''", "' x '", "'a,b,,c'", "'x\\ny'", "none", "true", "false",
         "[]", "[1, 2, 3]", "['b', 'a', 'B']", "[1, 'a']", "{}", "{'k': 1, 'a': [2]}", "(1, 2)", "u", "n", "s", "l", "d",
         "l[0]", "l[-1]", "d.k", "d['a']", "s[1:]", "s[::-1]", "l[1:3]", "l[::2]", "d.missing"]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "first", "last", "join", "join(', ')", "upper", "lower", "trim", "tojson", "tojson(indent=1)",
           "string", "int", "float", "list", "sort", "default('D')", "default('D', true)", "dictsort", "abs",
           "round", "round(1)", "sum", "min", "max", "title", "capitalize", "replace('a', 'X')", "count",
           "wordcount", "indent(2)", "e", "safe", "select('odd') | list", "reject('none') | list",
           "map('string') | list", "tojson(true)", "tojson(sort_keys=true)",
           "tojson(separators=(',', ':'))", "unique | list", "batch(2) | list", "items | list", "reverse | list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "true", "false", "boolean", "odd", "even", "divisibleby 2", "equalto 1", "in [1, 'a']", "callable",
         "lower", "upper"]
METHODS = ["startswith('a')", "endswith(('b', 'c'))", "strip()", "strip('a')", "split()", "split(',')",
           "split(',', 1)", "rsplit(',', 1)", "replace('a', 'b')", "upper()", "lower()", "title()", "find('b')",
           "count('a')", "splitlines()", "lstrip()", "rstrip(' x')", "get('k')", "get('z', 0)", "capitalize()", "format(1, 'a')"]


def _expr(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3: return rng.choice(ATOMS)
    if r < 0.5: return f"({_expr(rng, depth + 1)} {rng.choice(BINOPS)} {_expr(rng, depth + 1)})"
    if r < 0.65: return f"({_expr(rng, depth + 1)} | {rng.choice(FILTERS)})"
    if r < 0.75: return f"({_expr(rng, depth + 1)} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if r < 0.85: return f"{rng.choice(ATOMS)}.{rng.choice(METHODS)}"
    if r < 0.92: return f"({_expr(rng, depth + 1)} if {_expr(rng, depth + 1)} else {_expr(rng, depth + 1)})"
    return f"(not {_expr(rng, depth + 1)})"


EXPR_CONTEXT = {"n": None, "s": "a,b", "l": [3, 1, 2], "d": {"k": 1, "a": [2]}}


def random_expressions(n, seed):
    rng = random.Random(seed)
    return ["{{ " + _expr(rng) + " }}" for _ in range(n)]
