"""The llama.cpp engine: a GGUF model batch-decoded on its own thread (engine.py, the Engine;
batch_loop.py, slot_table.py, step.py: the loop, where a job starts, one decode), and the only
code that imports llama_cpp (native.py, backend.py; chat_format.py one floor up reads its
templates)."""
