"""strato.cli"""
