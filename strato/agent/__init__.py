"""The host agent: reports a host's inventory, location, tags and heartbeats to its zone."""

from strato.agent.agent import Agent
from strato.agent.config import AgentConfig, ConfigError

__all__ = ["Agent", "AgentConfig", "ConfigError"]
