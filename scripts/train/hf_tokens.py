#!/usr/bin/env python3
"""Print the training tokenizer's ids for a text file as a JSON list (for verify_llamacpp.py)."""
import json
import sys

from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
json.dump(tok(text)["input_ids"], open(sys.argv[3], "w"))
