/* list.h — the one intrusive doubly linked list, for every list whose nodes have `next`
 * and `prev` fields (spans in a heap's bins and the abandoned lists), and its variant with
 * a tail and named links (superslabs in the pool's indexes). Macros so that one body
 * serves each node type, with the type checking of the expressions they expand to. A node
 * not on a list has both links NULL. */
#ifndef HAKMEM_LIST_H
#define HAKMEM_LIST_H

/* Push node n at the front of the list whose head pointer is *head. */
#define HAK_LIST_PUSH(head, n) do {                                                      \
        (n)->prev = NULL;                                                                \
        (n)->next = *(head);                                                             \
        if (*(head) != NULL) (*(head))->prev = (n);                                      \
        *(head) = (n);                                                                   \
    } while (0)

/* Unlink node n from the list whose head pointer is *head; n's links become NULL. */
#define HAK_LIST_REMOVE(head, n) do {                                                    \
        if ((n)->prev != NULL) (n)->prev->next = (n)->next; else *(head) = (n)->next;   \
        if ((n)->next != NULL) (n)->next->prev = (n)->prev;                              \
        (n)->next = (n)->prev = NULL;                                                    \
    } while (0)

/* The same list with a tail, for nodes on several lists at once: q points to a struct with
 * `head` and `tail`, and the node keeps this list's `next` and `prev` in its member f (the
 * pool files a superslab by its free runs, its resident runs and its age at the same time). */
#define HAK_QUEUE_PUSH_FRONT(q, n, f) do {                                               \
        (n)->f.prev = NULL;                                                              \
        (n)->f.next = (q)->head;                                                         \
        if ((q)->head != NULL) (q)->head->f.prev = (n); else (q)->tail = (n);            \
        (q)->head = (n);                                                                 \
    } while (0)

#define HAK_QUEUE_PUSH_BACK(q, n, f) do {                                                \
        (n)->f.next = NULL;                                                              \
        (n)->f.prev = (q)->tail;                                                         \
        if ((q)->tail != NULL) (q)->tail->f.next = (n); else (q)->head = (n);            \
        (q)->tail = (n);                                                                 \
    } while (0)

#define HAK_QUEUE_REMOVE(q, n, f) do {                                                   \
        if ((n)->f.prev != NULL) (n)->f.prev->f.next = (n)->f.next; else (q)->head = (n)->f.next; \
        if ((n)->f.next != NULL) (n)->f.next->f.prev = (n)->f.prev; else (q)->tail = (n)->f.prev; \
        (n)->f.next = (n)->f.prev = NULL;                                                \
    } while (0)

#endif
