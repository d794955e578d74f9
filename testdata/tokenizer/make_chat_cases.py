#!/usr/bin/env python3
"""Writes chat_cases.json: conversations whose rendering gen_reference.py
computes with transformers' apply_chat_template. The output is committed."""
import json

weather_tool = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}
search_tool = {"type": "function", "function": {
    "name": "search_code", "description": "Search a repository <fast> & exact.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"]}}}

cases = [
    {"name": "single_user",
     "messages": [{"role": "user", "content": "What is 2+2?"}],
     "add_generation_prompt": True},
    {"name": "system_multi_turn",
     "messages": [
         {"role": "system", "content": "You are terse.\n"},
         {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": "Write a haiku about Go."}],
     "add_generation_prompt": True},
    {"name": "no_thinking",
     "messages": [
         {"role": "user", "content": "Name a prime."},
         {"role": "assistant", "content": "7", "reasoning_content": "small primes: 2, 3, 5, 7"},
         {"role": "user", "content": "Another?"}],
     "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    {"name": "thinking_history",
     "messages": [
         {"role": "user", "content": "Name a prime."},
         {"role": "assistant", "content": "7", "reasoning_content": "small primes: 2, 3, 5, 7"}],
     "add_generation_prompt": False},
    {"name": "tools_roundtrip",
     "messages": [
         {"role": "system", "content": "You can call tools."},
         {"role": "user", "content": "Weather in Zürich?"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "get_weather",
                                               "arguments": {"city": "Zürich", "unit": "c"}}}]},
         {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
         {"role": "assistant", "content": "It is 21 °C and clear."}],
     "tools": [weather_tool, search_tool],
     "add_generation_prompt": False},
    {"name": "tool_args_typed",
     "messages": [
         {"role": "user", "content": "Find TODOs"},
         {"role": "assistant", "content": "Searching.", "tool_calls": [
             {"type": "function", "function": {"name": "search_code", "arguments": {
                 "query": "TODO <fix>", "limit": 5, "flags": ["i", "w"],
                 "opts": {"regex": True, "path": "src/"}, "note": "naïve ✓"}}},
             {"type": "function", "function": {"name": "get_weather",
                                               "arguments": {"city": "東京"}}}]},
         {"role": "tool", "content": "3 matches"},
         {"role": "tool", "content": "晴れ"}],
     "tools": [search_tool, weather_tool],
     "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    {"name": "empty_system_opt_out",
     "messages": [
         {"role": "system", "content": ""},
         {"role": "user", "content": "No system prompt here."}],
     "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    {"name": "unicode_content",
     "messages": [
         {"role": "user", "content": "翻訳して: 'Hello' 👋\r\nand\ttabs   spaces  "},
         {"role": "assistant", "content": "こんにちは 👋"}],
     "add_generation_prompt": True},
    {"name": "second_system",
     "messages": [
         {"role": "user", "content": "a"},
         {"role": "system", "content": "Switch to French."},
         {"role": "user", "content": "b"}],
     "add_generation_prompt": True, "kwargs": {"enable_thinking": False}},
    {"name": "prefill_last_assistant",
     "messages": [
         {"role": "user", "content": "Count to three."},
         {"role": "assistant", "content": "1, 2,"}],
     "add_generation_prompt": False, "kwargs": {"enable_thinking": False}},
]
with open("chat_cases.json", "w", encoding="utf-8") as f:
    json.dump(cases, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(len(cases), "cases")
