"""oslo.messaging 18.3.1 with meshrouter's driver (.venv-oslo18, tests/oslo18/agent.py)."""
