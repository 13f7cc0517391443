"""Seeded random templates for the chat-template parity test (test_template_parity.py).

random_templates: text with spaces, tabs and newlines around tags carrying every whitespace-control
sign (jinja2's trim_blocks, lstrip_blocks, -, +, raw), nested if/for/set/comments.
random_expressions: expressions over literals, the EXPR_CONTEXT variables, an undefined name,
operators, filters, tests and str/dict methods, nested three deep.
random_programs: loops, ifs, sets, namespace attributes, a macro and loop.* over a few variables.
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

# Random programs: loops (targets, filters, else, break/continue), ifs, sets, namespace attributes,
# a macro and loop.* over a few variables, to hold Ferry's scoping to jinja2's.
PROGRAM_VARS = ["a", "b", "c"]
def _pexpr(rng):
    c = rng.random()
    if c < 0.2: return str(rng.randint(-2, 5))
    if c < 0.35: return rng.choice(PROGRAM_VARS)
    if c < 0.45: return "ns.v"
    if c < 0.55: return rng.choice(["loop.index", "loop.index0", "loop.first", "loop.last", "loop.length", "loop.revindex", "loop.previtem", "loop.nextitem", "loop.cycle('x', 'y')"])
    if c < 0.65: return "m(" + _pexpr(rng) + ")"
    if c < 0.75: return "(" + _pexpr(rng) + " " + rng.choice(["+", "~", "*", "==", "and", "or"]) + " " + _pexpr(rng) + ")"
    if c < 0.85: return "xs[" + str(rng.randint(-3, 3)) + "]"
    return rng.choice(["xs | length", "xs | join('-')", "(a is defined)", "(loop is defined)", "caller is defined"])
def _pblock(rng, depth):
    out = []
    for _ in range(rng.randint(1, 4)):
        c = rng.random()
        if c < 0.25: out.append("{{ " + _pexpr(rng) + " }}")
        elif c < 0.4: out.append("{% set " + rng.choice(PROGRAM_VARS) + " = " + _pexpr(rng) + " %}")
        elif c < 0.5: out.append("{% set ns.v = " + _pexpr(rng) + " %}")
        elif c < 0.6 and depth > 0: out.append(rng.choice(["{% break %}", "{% continue %}"]))
        elif c < 0.8 and depth < 3:
            tgt = rng.choice(["x", "a", "x, y"])
            it = "pairs" if tgt == "x, y" else rng.choice(["xs", "range(3)", "[]", "xs[::-1]"])
            cond = rng.choice(["", "", " if x != 2" if tgt == "x" else ""])
            els = "{% else %}E" if rng.random() < 0.3 else ""
            out.append("{% for " + tgt + " in " + it + cond + " %}" + _pblock(rng, depth + 1) + els + "{% endfor %}")
        elif depth < 3:
            out.append("{% if " + _pexpr(rng) + " %}" + _pblock(rng, depth + 1) + ("{% elif " + _pexpr(rng) + " %}" + _pblock(rng, depth + 1) if rng.random() < 0.3 else "") + ("{% else %}" + _pblock(rng, depth + 1) if rng.random() < 0.5 else "") + "{% endif %}")
        else:
            out.append("|")
    return "".join(out)
def random_programs(n, seed):
    rng = random.Random(seed)
    progs = []
    for _ in range(n):
        head = "{% set ns = namespace(v=0) %}{% macro m(p, q=1) %}<{{ p }}:{{ q }}:{{ a }}>{% endmacro %}"
        if rng.random() < 0.5: head += "{% set a = " + str(rng.randint(0, 3)) + " %}"
        progs.append(head + _pblock(rng, 0) + "[{{ a }}{{ b }}{{ c }}{{ ns.v }}]")
    return progs
PROGRAM_CONTEXT = {"xs": [1, 2, 3], "pairs": [[1, "a"], [2, "b"]], "b": "B"}
