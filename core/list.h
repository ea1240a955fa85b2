/* SPDX-License-Identifier: MIT */
/*
 * core/list.h - intrusive doubly-linked lists, the one home for them: the
 * node lives inside the element, so linking never allocates (STYLE rule 7).
 * Two shapes:
 *
 *  - a circular list with a sentinel head (struct corio__link): O(1) insert
 *    and unlink without knowing the head, for lists kept in private structs
 *    (net's armed receives and sockets);
 *  - a NULL-terminated list threaded through named pointer fields of the
 *    elements (CORIO__DLIST_*), for lists whose head is a plain element
 *    pointer inside a public struct (a corio_waitq's head/tail, a group's
 *    members, the shard's live fibers), whose layout must not change.
 *
 * Owner-thread only, like everything shard-local.
 */
#ifndef CORIO_CORE_LIST_H
#define CORIO_CORE_LIST_H

#include <stdbool.h>
#include <stddef.h>

/* ---- circular, with a sentinel ------------------------------------------------- */

struct corio__link {
	struct corio__link *next, *prev;
};

static inline void corio__list_init(struct corio__link *h)
{
	h->next = h->prev = h;
}
/* A node is linked while its next is set (corio__list_del clears it). */
static inline bool corio__list_linked(const struct corio__link *n)
{
	return n->next != NULL;
}
static inline bool corio__list_empty(const struct corio__link *h)
{
	return h->next == h;
}
/* Append n at the tail of h. */
static inline void corio__list_add(struct corio__link *h, struct corio__link *n)
{
	n->next = h;
	n->prev = h->prev;
	h->prev->next = n;
	h->prev = n;
}
/* Unlink n if it is linked. */
static inline void corio__list_del(struct corio__link *n)
{
	if (!n->next)
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = NULL;
}
#define corio__list_entry(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- NULL-terminated, through named fields --------------------------------------- */

/* Push e at the front of the list starting at head (an lvalue). */
#define CORIO__DLIST_PUSH(head, e, next, prev)      \
	do {                                        \
		(e)->prev = NULL;                   \
		(e)->next = (head);                 \
		if (head)                           \
			(head)->prev = (e);         \
		(head) = (e);                       \
	} while (0)

/* Append e at the back of the list head..tail (lvalues). */
#define CORIO__DLIST_APPEND(head, tail, e, next, prev) \
	do {                                           \
		(e)->next = NULL;                      \
		(e)->prev = (tail);                    \
		if (tail)                              \
			(tail)->next = (e);            \
		else                                   \
			(head) = (e);                  \
		(tail) = (e);                          \
	} while (0)

/* Unlink e from the list head..tail; pass a tail-less list's head twice
 * with CORIO__DLIST_DEL. */
#define CORIO__DLIST_DEL2(head, tail, e, next, prev)  \
	do {                                          \
		if ((e)->prev)                        \
			(e)->prev->next = (e)->next;  \
		else                                  \
			(head) = (e)->next;           \
		if ((e)->next)                        \
			(e)->next->prev = (e)->prev;  \
		else                                  \
			(tail) = (e)->prev;           \
		(e)->next = (e)->prev = NULL;         \
	} while (0)

#define CORIO__DLIST_DEL(head, e, next, prev)         \
	do {                                          \
		if ((e)->prev)                        \
			(e)->prev->next = (e)->next;  \
		else                                  \
			(head) = (e)->next;           \
		if ((e)->next)                        \
			(e)->next->prev = (e)->prev;  \
		(e)->next = (e)->prev = NULL;         \
	} while (0)

#endif
