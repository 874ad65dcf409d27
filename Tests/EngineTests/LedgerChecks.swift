import Foundation

/// One property checked against the ledger: its name and what broke it (empty: it holds).
struct CheckResult: CustomStringConvertible {
    let name: String
    var problems: [String] = []
    var passed: Bool { problems.isEmpty }

    var description: String {
        passed ? "PASS \(name)" : "FAIL \(name) (\(problems.count)):\n  " + problems.joined(separator: "\n  ")
    }
}

/// What the ledger says the final state must be: which notes exist, in which folder, with which
/// title, and which folders exist. A command that exited 0 is acknowledged: what it did must
/// stay. One that failed before saving (a refusal the app explains) did nothing; any other
/// failure may or may not have saved, so what it did is allowed but not required.
struct LedgerExpectations {
    /// The refusals a command makes before it saves anything.
    static let refusals = [
        "no note has the id or title", "there is no folder", "holds", "there is already a folder", "notes match",
    ]

    /// A write of one property of a note by one command.
    struct Write {
        let entry: LedgerEntry
        let value: String
        let certain: Bool
    }

    let entries: [LedgerEntry]
    let watchLines: [(at: Duration, device: String, line: String)]
    /// Notes acknowledged as added, by id.
    private(set) var added: [String: LedgerEntry] = [:]
    /// Titles of adds that may have saved though they did not succeed.
    private(set) var maybeAddedTitles: Set<String> = []
    /// Notes acknowledged as deleted (and ones that may have been), by id.
    private(set) var deleted: [String: LedgerEntry] = [:]
    private(set) var maybeDeleted: Set<String> = []
    private(set) var folderWrites: [String: [Write]] = [:]
    private(set) var titleWrites: [String: [Write]] = [:]
    private(set) var pinWrites: [String: [Write]] = [:]
    private(set) var foldersAdded: Set<String> = ["Inbox"]
    private(set) var maybeFoldersAdded: Set<String> = []
    private(set) var foldersDeleted: Set<String> = []
    private(set) var maybeFoldersDeleted: Set<String> = []

    init(_ entries: [LedgerEntry], watchLines: [(at: Duration, device: String, line: String)] = []) {
        self.entries = entries
        self.watchLines = watchLines
        for entry in entries {
            let certain = entry.acknowledged
            let refused = !certain && entry.status != nil && Self.refusals.contains { entry.errors.contains($0) }
            guard certain || !refused else { continue }
            switch entry.operation {
            case .addNote(let title, let folder, _, let pin):
                if let id = entry.addedID {
                    added[id] = entry
                    folderWrites[id, default: []].append(Write(entry: entry, value: folder, certain: true))
                    titleWrites[id, default: []].append(Write(entry: entry, value: title, certain: true))
                    pinWrites[id, default: []].append(Write(entry: entry, value: pin ? "yes" : "no", certain: true))
                } else {
                    maybeAddedTitles.insert(title)
                }
            case .editNote(let id, let title, _, let folder, let pin):
                // Every field the command names is a write, even of the value the device showed
                // (the sample writes exactly the fields named): the last such write wins.
                if let folder {
                    folderWrites[id, default: []].append(Write(entry: entry, value: folder, certain: certain))
                }
                if let pin {
                    pinWrites[id, default: []].append(Write(entry: entry, value: pin ? "yes" : "no", certain: certain))
                }
                if let title {
                    titleWrites[id, default: []].append(Write(entry: entry, value: title, certain: certain))
                }
            case .deleteNote(let id):
                if certain { deleted[id] = entry } else { maybeDeleted.insert(id) }
            case .addFolder(let name):
                if certain { foldersAdded.insert(name) } else { maybeFoldersAdded.insert(name) }
            case .deleteFolder(let name):
                if certain { foldersDeleted.insert(name) } else { maybeFoldersDeleted.insert(name) }
            case .tagNote, .list, .listFolders, .sync, .status:
                break
            }
        }
    }

    /// The values the last writer may have left: every certain write that no other certain write
    /// strictly follows (the saves of commands that overlap in time are ordered by the engine's
    /// clock, which the ledger cannot see), plus uncertain writes that no certain write follows.
    static func lastWriters(_ writes: [Write]) -> [Write] {
        let certain = writes.filter(\.certain)
        func followed(_ write: Write) -> Bool { certain.contains { $0.entry.start > write.entry.end } }
        return writes.filter { !followed($0) }
    }

    /// The folders a note may be in: its last writers' choices, the Inbox for a deleted folder.
    func expectedFolders(of id: String) -> Set<String> {
        var folders = Set<String>()
        for write in Self.lastWriters(folderWrites[id] ?? []) {
            if foldersDeleted.contains(write.value) {
                folders.insert("Inbox")
            } else {
                folders.insert(write.value)
                if maybeFoldersDeleted.contains(write.value) { folders.insert("Inbox") }
            }
        }
        return folders
    }

    func expectedTitles(of id: String) -> Set<String> {
        Set(Self.lastWriters(titleWrites[id] ?? []).map(\.value))
    }

    /// The ledger lines about a note, for failure messages.
    func history(of id: String) -> String {
        let lines =
            entries.filter { $0.noteID == id }.map(\.summary)
            + watchLines.filter { $0.line.contains("note \(id)") }.map {
                "[\(seconds($0.at))] \($0.device)/watch \($0.line)"
            }
        return lines.isEmpty ? "    (no command named it)" : lines.map { "    " + $0 }.joined(separator: "\n")
    }

    // MARK: The checks

    /// Every acknowledged note is there (unless an acknowledged or possible delete removed it),
    /// no deleted note is, and no note is there that no command may have made.
    func presence(in notes: [NoteLine], device: String) -> [CheckResult] {
        let present = Dictionary(notes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var acknowledged = CheckResult(name: "every acknowledged note present (\(device))")
        for (id, _) in added.sorted(by: { $0.value.index < $1.value.index })
        where deleted[id] == nil && !maybeDeleted.contains(id) && present[id] == nil {
            acknowledged.problems.append("note \(id) is missing; its ledger:\n\(history(of: id))")
        }
        var gone = CheckResult(name: "every acknowledged delete kept (\(device))")
        for (id, entry) in deleted.sorted(by: { $0.value.index < $1.value.index }) {
            if let note = present[id] {
                gone.problems.append(
                    "note \(id) was deleted by #\(entry.index) but is there: \(note.raw)\n\(history(of: id))"
                )
            }
        }
        var phantoms = CheckResult(name: "no note that no command made (\(device))")
        for note in notes where added[note.id] == nil && !maybeAddedTitles.contains(note.title ?? "") {
            phantoms.problems.append("unknown note: \(note.raw)")
        }
        return [acknowledged, gone, phantoms]
    }

    /// Every note is in the folder its last writer chose (the Inbox when that folder was
    /// deleted), and has the title its last writer gave it.
    func lastWriters(in notes: [NoteLine], device: String) -> [CheckResult] {
        var folders = CheckResult(name: "every note in the folder its last writer chose (\(device))")
        var titles = CheckResult(name: "every note titled as its last writer said (\(device))")
        for note in notes where added[note.id] != nil {
            let expected = expectedFolders(of: note.id)
            if let folder = note.folder, !expected.isEmpty, !expected.contains(folder) {
                folders.problems.append(
                    "note \(note.id) is in \"\(folder)\", expected \(expected.sorted().map { "\"\($0)\"" }.joined(separator: " or ")): \(note.raw)\n\(history(of: note.id))"
                )
            }
            let expectedTitles = expectedTitles(of: note.id)
            if let title = note.title, !expectedTitles.isEmpty, !expectedTitles.contains(title) {
                titles.problems.append(
                    "note \(note.id) is titled \"\(title)\", expected \(expectedTitles.sorted().map { "\"\($0)\"" }.joined(separator: " or "))\n\(history(of: note.id))"
                )
            }
        }
        var pins = CheckResult(name: "every note pinned as its last writer said (\(device))")
        for note in notes where added[note.id] != nil {
            let expected = Set(Self.lastWriters(pinWrites[note.id] ?? []).map(\.value))
            if let pinned = note.fields["pinned"], !expected.isEmpty, !expected.contains(pinned) {
                pins.problems.append(
                    "note \(note.id) has pinned=\(pinned), expected \(expected.sorted().joined(separator: " or "))\n\(history(of: note.id))"
                )
            }
        }
        return [folders, titles, pins]
    }

    /// No note twice (by id or by title: every title the test gives is unique), no folder name
    /// twice, and exactly the folders the ledger says.
    func duplicates(notes: [NoteLine], folders: [String], device: String) -> [CheckResult] {
        var result = CheckResult(name: "no duplicates (\(device))")
        for (id, count) in Dictionary(notes.map { ($0.id, 1) }, uniquingKeysWith: +) where count > 1 {
            result.problems.append("note id \(id) listed \(count) times")
        }
        for (title, count) in Dictionary(notes.map { ($0.title ?? "?", 1) }, uniquingKeysWith: +) where count > 1 {
            result.problems.append(
                "title \"\(title)\" on \(count) notes: "
                    + notes.filter { $0.title == title }.map(\.raw).joined(separator: " | ")
            )
        }
        let names = folders.compactMap(Self.folderName)
        for (name, count) in Dictionary(names.map { ($0, 1) }, uniquingKeysWith: +) where count > 1 {
            result.problems.append("folder \"\(name)\" listed \(count) times: \(folders)")
        }
        var expected = CheckResult(name: "exactly the folders the ledger made and kept (\(device))")
        let present = Set(names)
        for name in foldersAdded.subtracting(foldersDeleted).subtracting(maybeFoldersDeleted)
        where !present.contains(name) {
            expected.problems.append("folder \"\(name)\" is missing")
        }
        for name in present.subtracting(foldersAdded).subtracting(maybeFoldersAdded) {
            expected.problems.append("folder \"\(name)\" was never added")
        }
        for name in present.intersection(foldersDeleted) {
            expected.problems.append("folder \"\(name)\" was deleted but is there")
        }
        return [result, expected]
    }

    /// Every command ended: it succeeded or refused with a reason the app gives; none crashed,
    /// timed out or failed otherwise.
    func commandsEnded() -> CheckResult {
        var result = CheckResult(name: "every command succeeded or refused for a stated reason")
        for entry in entries where !entry.acknowledged {
            let refused = entry.status == 1 && Self.refusals.contains { entry.errors.contains($0) }
            if !refused {
                result.problems.append(entry.summary + (entry.lines.isEmpty ? "" : " output: \(entry.lines.suffix(5))"))
            }
        }
        return result
    }

    /// `folder "NAME" notes=N` → NAME.
    static func folderName(_ line: String) -> String? {
        guard line.hasPrefix("folder \""), let end = line.range(of: "\" notes=", options: .backwards) else {
            return nil
        }
        return String(line[line.index(line.startIndex, offsetBy: 8)..<end.lowerBound]).replacingOccurrences(
            of: "\\\"",
            with: "\""
        )
    }
}

/// The differences between two devices' lines, for failure messages: what only each has, and
/// whether the rest differs in order only.
func listDifference(_ first: (name: String, lines: [String]), _ second: (name: String, lines: [String])) -> String {
    let a = Set(first.lines)
    let b = Set(second.lines)
    var text: [String] = []
    let onlyA = first.lines.filter { !b.contains($0) }
    let onlyB = second.lines.filter { !a.contains($0) }
    if !onlyA.isEmpty {
        text.append("only on \(first.name) (\(onlyA.count)):\n    " + onlyA.joined(separator: "\n    "))
    }
    if !onlyB.isEmpty {
        text.append("only on \(second.name) (\(onlyB.count)):\n    " + onlyB.joined(separator: "\n    "))
    }
    if onlyA.isEmpty && onlyB.isEmpty && first.lines != second.lines {
        text.append("the same lines in a different order")
    }
    return text.joined(separator: "\n")
}
