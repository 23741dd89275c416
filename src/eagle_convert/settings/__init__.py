"""What a command is asked to do, as frozen settings objects that declare their own command-line options once
(declare.py) and build themselves from the parsed command line, as vLLM's EngineArgs does. The library takes them
(conversion/, benchmark/); the keyword-argument API (api.py) builds them; the CLI (cli/) composes their options."""
