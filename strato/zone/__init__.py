"""strato.zone"""
