#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: file_tree
short_description: Keep a directory's files equal to a given set of text files, in one task
version_added: 0.1.0
description:
  - Makes the directory O(path) hold exactly the files of O(files) (relative path -> text)
    and nothing else (or, with O(exclusive=false), hold them among others), in one module
    call where a loop of M(ansible.builtin.copy) costs a round trip per file.
  - Creates the missing directories (O(path) itself and the missing directories above it
    included), writes only the files whose content differs or that do not exist, sets the
    mode and owner of the files and directories whose O(mode), O(directory_mode), O(owner)
    or O(group) differ, and removes every other entry below O(path) (files, links,
    directories that hold no wanted file); with O(exclusive=false), only the names of
    O(absent), in a directory shared with others.
  - Each file is written to a temporary file in its own directory, then renamed over the old
    one (AnsibleModule's C(atomic_move)), so a reader sees the old file or the new, never a
    part.
  - Links below O(path) are never followed; a link where a file or a directory is wanted is
    replaced. O(path) itself may be a link to a directory.
  - Every input is checked before anything is written; a bad one fails the task naming the
    path and what is valid, and leaves the tree as it was.
author:
  - gpuops.k8s maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  path:
    description:
      - The directory to keep; an absolute path, not C(/).
      - A file (or a link to one) at O(path), or at a directory above it, is an error.
    type: path
    required: true
  files:
    description:
      - The files the directory holds, as relative path -> content.
      - A path is names joined by single C(/), none of them C(.) or C(..), with no leading
        or trailing C(/), so that it cannot leave O(path). No file may also be the directory
        of another (C(a) and C(a/b)).
      - Content is text, written as UTF-8, byte for byte as given (no newline added). With
        M(ansible.builtin.file) lookups, pass C(rstrip=false) to keep a file's last newline.
      - An empty dict empties the directory.
    type: dict
    required: true
  mode:
    description:
      - The files' mode, as an octal string (V('0644')). An integer is taken as the mode's
        value, as YAML reads an unquoted V(0644). Symbolic modes are not supported.
    type: raw
    default: '0644'
  directory_mode:
    description:
      - The mode of O(path) and of the directories below it, as O(mode) is given.
    type: raw
    default: '0755'
  owner:
    description:
      - The user (a name or a numeric id) that owns the files and directories.
      - Unset, new entries belong to the user the module runs as and existing ones keep
        their owner.
    type: str
  group:
    description:
      - The group (a name or a numeric id) of the files and directories; unset, as O(owner).
    type: str
  exclusive:
    description:
      - V(true), the directory holds the files of O(files) and nothing else.
      - V(false), the directory holds them among entries that are not this module's (a
        shared directory such as C(/etc/apt) or C(/etc/systemd/system)). Only the files of
        O(files), the directories above them and the names in O(absent) are read or
        changed, and O(path) itself, where it exists, keeps its mode and owner. A directory
        where a file is wanted, or anything but a directory above a wanted file, is then an
        error rather than replaced.
    type: bool
    default: true
    version_added: 0.2.0
  absent:
    description:
      - Files or links below O(path) to remove where they exist, as relative paths (as the
        keys of O(files)), for example what an earlier release wrote. Only with
        O(exclusive=false); a directory there is an error.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
notes:
  - In the lists this module returns, a directory's name ends in C(/) and O(path) itself is
    C(./); a file's name is the key of O(files).
  - Check mode reads the tree and writes nothing; the lists and the diff it returns are what
    the real run does.
  - The diff shows each changed file's text before and after, its mode (and owner and group
    where set) in the headers; a file over 64 KiB, or not UTF-8, is shown as its size and
    SHA-256. A directory, or a file whose only change is its mode or owner, shows as path,
    state and attributes.
seealso:
  - module: ansible.builtin.copy
    description: One file, or a directory copied file by file.
  - module: ansible.posix.synchronize
    description: rsync, for large or binary trees, where the controller may run it.
"""

EXAMPLES = r"""
- name: Copy a program's source, removing the files its new release dropped
  gpuops.k8s.file_tree:
    path: /opt/example/src
    files: "{{ dict(names | zip(query('ansible.builtin.file', *sources, rstrip=false))) }}"
    owner: root
    group: root
    mode: "0644"
    directory_mode: "0755"
  vars:
    names: [pyproject.toml, example/__init__.py, example/main.py]
    sources: "{{ names | map('regex_replace', '^', role_path ~ '/files/example/') }}"
  register: source
  notify: Restart example

- name: Rebuild when a file went away
  ansible.builtin.command: /opt/example/build
  when: source.removed | length > 0
  changed_when: true

- name: Write two configuration files, nothing else in the directory
  gpuops.k8s.file_tree:
    path: /etc/example/conf.d
    files:
      10-main.conf: |
        listen = 127.0.0.1
      20-tls.conf: |
        tls = on
    mode: "0640"
    group: example

- name: Declare an apt repository and its key, and remove the one-line source it replaces
  gpuops.k8s.file_tree:
    path: /etc/apt
    exclusive: false
    files:
      keyrings/example.asc: "{{ example_key }}"
      sources.list.d/example.sources: "{{ lookup('ansible.builtin.template', 'example.sources.j2') }}"
    absent: [sources.list.d/example.list]
    owner: root
    group: root
"""

RETURN = r"""
added:
  description:
    - The files and directories created (or, in check mode, that would be), sorted.
    - A directory's name ends in C(/); O(path) itself is C(./).
  returned: always
  type: list
  elements: str
  sample: [./, example/, example/__init__.py, pyproject.toml]
updated:
  description:
    - The files written anew (other content, or not a regular file before) and the files and
      directories whose mode, owner or group were set, sorted.
  returned: always
  type: list
  elements: str
  sample: [example/main.py]
removed:
  description:
    - The files, links and directories removed because O(files) does not hold them (with
      O(exclusive=false), the names of O(absent) that existed), sorted; a directory's
      contents are listed with it.
  returned: always
  type: list
  elements: str
  sample: [example/old.py, tests/, tests/test_main.py]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s.plugins.module_utils._file_tree import FileTreeError, run

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    files=dict(type="dict", required=True),
    mode=dict(type="raw", default="0644"),
    directory_mode=dict(type="raw", default="0755"),
    owner=dict(type="str"),
    group=dict(type="str"),
    exclusive=dict(type="bool", default=True),
    absent=dict(type="list", elements="str", default=[]),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module)
    except FileTreeError as error:
        module.fail_json(msg=str(error), changed=error.changed)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
