import Foundation
import Persistence

/// Validation repair for `Recipe`: a recipe left without a category (its category was deleted,
/// here or on another device whose deletion arrived) moves to Uncategorized.
///
/// Validation runs at each local save, never while an import applies another device's changes;
/// when the save finds violations, the context hands each invalid record to its entity's
/// policy, validates again, and saves once the records are valid (or fails, listing what is
/// still wrong, after ``ObjectContext/maximumRepairPasses`` passes). A repair is an ordinary
/// local edit: sync exports it like any other.
///
/// Repair only what is yours to decide: a reference to a record that has not arrived yet
/// (``MissingTargetState/notArrived``) is left alone, because sync may still deliver it.
public struct RecipeRepair: ValidationRepairPolicy {
    /// `"Recipe"`.
    public let entityName = "Recipe"

    /// A repair policy for recipes.
    public init() {}

    /// Moves `recipe` to Uncategorized (creating it if needed) when its category is missing or
    /// deleted; returns whether it changed anything.
    public func repair(_ recipe: Record, violations: [ValidationViolation], in context: ObjectContext) throws -> Bool {
        let broken = violations.contains { violation in
            violation.property == "category"
                && (violation.rule == .missingRequiredRelationship
                    || (violation.rule == .missingDestination && violation.targetState != .notArrived))
        }
        guard broken else { return false }
        if try context.record(with: RecipeModel.uncategorizedID) == nil {
            try context.insert(RecipeModel.uncategorized())
        }
        var recipe = recipe
        recipe.toOne["category"] = RecipeModel.uncategorizedID
        try context.update(recipe)
        return true
    }
}
