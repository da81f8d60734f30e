"""strato.sim"""
