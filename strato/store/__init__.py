"""strato.store"""
